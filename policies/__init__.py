"""The spot-training policy pack: the operating regime as CrossGuard policies, one module per
domain.

`ALL_POLICIES` is what `__main__.py` hands to `PolicyPack`; the README table is generated from it.
"""

from policies import (
    aws_alerts,
    aws_iam,
    aws_node_pools,
    aws_storage,
    cost_tags,
    exposure,
    gcp_iam,
    gcp_monitoring,
    gcp_node_pools,
    gcp_storage,
    kubernetes,
    waiver_rules,
)

ALL_POLICIES = [
    *aws_storage.POLICIES,
    *aws_iam.POLICIES,
    *aws_alerts.POLICIES,
    *aws_node_pools.POLICIES,
    *cost_tags.POLICIES,
    *exposure.POLICIES,
    *kubernetes.POLICIES,
    *gcp_storage.POLICIES,
    *gcp_iam.POLICIES,
    *gcp_monitoring.POLICIES,
    *gcp_node_pools.POLICIES,
    # Last: they read what the policies before them left to the waivers.
    *waiver_rules.POLICIES,
]
