from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.kubernetes.checks.resource.base_spec_check import BaseK8Check

from policies.inputs import dig
from policies.spot_workloads import tolerates_spot


class ServicesAvoidSpot(BaseK8Check):
    """Long-running services cannot checkpoint their way through a recall; they belong on the
    stable pool and must not tolerate the spot taint."""

    def __init__(self) -> None:
        super().__init__(
            name="Service workloads (Deployment, StatefulSet, DaemonSet) do not tolerate spot",
            id="CKV_SPOT_2",
            categories=(CheckCategories.KUBERNETES,),
            supported_entities=("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"),
        )

    def scan_spec_conf(self, conf):
        pod = dig(conf, "spec", "template", "spec", default={})
        return CheckResult.FAILED if tolerates_spot(pod) else CheckResult.PASSED


check = ServicesAvoidSpot()
