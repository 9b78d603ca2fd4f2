from checkov.common.models.enums import CheckCategories, CheckResult
from checkov.dockerfile.base_dockerfile_check import BaseDockerfileCheck

ROOT = ("root", "0")


class ImageRunsAsNonRoot(BaseDockerfileCheck):
    """The final stage must switch to a non-root USER: a training container holds credentials
    for the team's checkpoint prefix and runs untrusted model code."""

    def __init__(self) -> None:
        super().__init__(
            name="The final build stage runs as a non-root USER",
            id="CKV_SPOT_4",
            categories=(CheckCategories.IAM,),
            supported_instructions=("*",),
        )

    def scan_resource_conf(self, conf):
        final_stage = max((i["startline"] for i in conf.get("FROM", [])), default=-1)
        users = [i for i in conf.get("USER", []) if i["startline"] > final_stage]
        if not users:
            return CheckResult.FAILED, None
        user = users[-1]["value"].split(":")[0].strip()
        return (CheckResult.FAILED if user in ROOT else CheckResult.PASSED), [users[-1]]


check = ImageRunsAsNonRoot()
