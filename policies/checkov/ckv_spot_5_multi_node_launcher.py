from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.kubernetes.checks.resource.base_spec_check import BaseK8Check

from policies.spot_workloads import job_specs, launcher_problem, pod_spec, tolerates_spot


class SpotJobLaunchesThroughSpotsafeRun(BaseK8Check):
    """torchrun exits 1 when its ranks stop for a preemption, so the Job counts it as a failure
    (however the container starts it: directly, through `env`, in a shell's `-c` script, or as
    `python -m torch.distributed.launch`); and an agent that hosts the c10d rendezvous takes the
    whole run down with its node."""

    def __init__(self) -> None:
        super().__init__(
            name="Spot-tolerating Jobs launch ranks with spotsafe-run and a rendezvous elsewhere",
            id="CKV_SPOT_5",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("Job", "CronJob", "JobSet"),
        )

    def scan_spec_conf(self, conf):
        for job in job_specs(conf.get("kind", ""), conf.get("spec") or {}):
            pod = pod_spec(job)
            if tolerates_spot(pod) and launcher_problem(pod):
                return CheckResult.FAILED
        return CheckResult.PASSED


check = SpotJobLaunchesThroughSpotsafeRun()
