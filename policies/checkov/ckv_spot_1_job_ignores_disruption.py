from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.kubernetes.checks.resource.base_spec_check import BaseK8Check

from policies.spot_workloads import ignores_disruption, job_specs, pod_spec, tolerates_spot


class SpotJobIgnoresDisruption(BaseK8Check):
    """A preemption is not a failure: a spot job that counts DisruptionTarget against its
    backoffLimit dies after a few recalls instead of resuming from its checkpoint."""

    def __init__(self) -> None:
        super().__init__(
            name="Spot-tolerating Jobs Ignore the DisruptionTarget condition in podFailurePolicy",
            id="CKV_SPOT_1",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("Job", "CronJob", "JobSet"),
        )

    def scan_spec_conf(self, conf):
        for job in job_specs(conf.get("kind", ""), conf.get("spec") or {}):
            if tolerates_spot(pod_spec(job)) and not ignores_disruption(job):
                return CheckResult.FAILED
        return CheckResult.PASSED


check = SpotJobIgnoresDisruption()
