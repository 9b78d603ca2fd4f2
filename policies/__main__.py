"""Assembles the pack. PolicyPack(...) starts the analyzer gRPC server and blocks, so nothing else
lives here: the policies are in the per-domain modules of this package."""

from pulumi_policy import EnforcementLevel, PolicyPack

from policies import ALL_POLICIES

PolicyPack(
    name="spot-training-regime",
    enforcement_level=EnforcementLevel.ADVISORY,
    policies=ALL_POLICIES,
)
