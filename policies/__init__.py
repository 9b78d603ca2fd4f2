"""The spot-training policy pack: the operating regime as CrossGuard policies, one module per
domain.

`ALL_POLICIES` is what `__main__.py` hands to `PolicyPack`; the README table is generated from it.
It is built on first use (PEP 562): the checkov checks share `spot_workloads` and `inputs` with
the pack, and import them in checkov's own environment, which has no pulumi-policy.
"""

import importlib

# The modules whose POLICIES the pack runs, in this order; the waiver rules last: they read what
# the policies before them left to the waivers.
MODULES = (
    "aws_storage",
    "aws_iam",
    "aws_alerts",
    "aws_node_pools",
    "cost_tags",
    "exposure",
    "kubernetes",
    "gcp_storage",
    "gcp_iam",
    "gcp_monitoring",
    "gcp_node_pools",
    "waiver_rules",
)


def __getattr__(name: str) -> object:
    if name != "ALL_POLICIES":
        raise AttributeError(f"module 'policies' has no attribute {name!r}")
    value = [
        policy
        for module in MODULES
        for policy in importlib.import_module(f"policies.{module}").POLICIES
    ]
    globals()[name] = value
    return value
