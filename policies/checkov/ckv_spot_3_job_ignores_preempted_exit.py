from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.kubernetes.checks.resource.base_spec_check import BaseK8Check

from policies.spot_workloads import ignores_preempted_exit, job_specs, pod_spec, tolerates_spot


class SpotJobIgnoresPreemptedExit(BaseK8Check):
    """The runtime exits 75 (EX_TEMPFAIL) after its final checkpoint on a termination notice;
    that exit means "resume me", not a failure."""

    def __init__(self) -> None:
        super().__init__(
            name="Spot-tolerating Jobs ignore the runtime's preempted exit code 75",
            id="CKV_SPOT_3",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("Job", "CronJob", "JobSet"),
        )

    def scan_spec_conf(self, conf):
        for job in job_specs(conf.get("kind", ""), conf.get("spec") or {}):
            if tolerates_spot(pod_spec(job)) and not ignores_preempted_exit(job):
                return CheckResult.FAILED
        return CheckResult.PASSED


check = SpotJobIgnoresPreemptedExit()
