"""The policy pack, started once per session the way the Pulumi CLI starts it."""

from __future__ import annotations

import pytest
from spot_policy_cases import PACK_DIR

from spotctl.preview.analyzer import PolicyAnalyzer


@pytest.fixture(scope="session")
def analyzer():
    with PolicyAnalyzer(PACK_DIR, project="spot-training", stack="test") as running:
        yield running


@pytest.fixture
def violations(analyzer):
    """violations(policy, *resources) -> the messages that policy reports on these resources."""

    def run(policy: str, *resources) -> list[str]:
        report = analyzer.analyze(resources)
        return [v.message.splitlines()[-1] for v in report.violations if v.policy == policy]

    return run
