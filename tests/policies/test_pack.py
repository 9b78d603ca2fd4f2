"""The pack as a plugin: what it announces, how it handles unknowns and failures, and the README
table that is generated from it.

The `policies` package is only imported in subprocesses here: under pytest, tests/policies would
shadow it as a namespace package."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from pulumi.runtime.proto import analyzer_pb2
from spot_policy_cases import PACK_DIR, resource

from spotctl.preview.analyzer import LEVELS, PolicyAnalyzer, PolicyPackError

UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def readme_rows() -> dict[str, str]:
    """{policy name: level} from the README's generated table."""
    text = (PACK_DIR / "README.md").read_text()
    rows = re.findall(
        r'^\| <a id="([a-z0-9-]+)"></a>`\1` \| (mandatory|advisory) \|', text, re.MULTILINE
    )
    return dict(rows)


def test_the_running_pack_announces_what_the_readme_lists(analyzer):
    announced = {p.name: LEVELS[p.enforcementLevel] for p in analyzer.info.policies}
    assert analyzer.info.name == "spot-training-regime"
    assert announced == readme_rows()
    assert len(announced) >= 19
    schema = {p.name: p.configSchema for p in analyzer.info.policies}
    assert schema["eks-spot-pool-diversified"].properties["minInstanceTypes"]["default"] == 3


def test_every_policy_says_how_bad_how_to_fix_and_where_to_read(analyzer):
    """pulumi-policy's metadata, as the running pack announces it (GetAnalyzerInfo): a severity,
    remediation steps, and a URL whose anchor is the policy's row in the pack's README."""
    readme = (PACK_DIR / "README.md").read_text()
    for policy in analyzer.info.policies:
        assert policy.severity != analyzer_pb2.POLICY_SEVERITY_UNSPECIFIED, policy.name
        assert len(policy.remediation_steps.split()) >= 5, policy.name
        page, _, anchor = policy.url.partition("#")
        assert page.endswith("/policies/README.md") and anchor == policy.name, policy.url
        assert f'<a id="{anchor}"></a>' in readme, policy.name


def test_policy_names_are_kebab_case_service_rule(analyzer):
    for policy in analyzer.info.policies:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", policy.name), policy.name


def test_an_unknown_input_is_reported_not_guessed(analyzer):
    spot = resource(
        "aws:eks/nodeGroup:NodeGroup", "spot", {"capacityType": "SPOT", "taints": UNKNOWN}
    )
    report = analyzer.analyze([spot])
    tainted = [v for v in report.violations if v.policy == "eks-spot-pool-tainted"]
    assert len(tainted) == 1
    assert tainted[0].level == "advisory" and "can't be known during preview" in tainted[0].message


def test_a_pack_that_crashes_on_start_is_a_clear_error(tmp_path):
    (tmp_path / "PulumiPolicy.yaml").write_text("runtime: python\nversion: 0.0.1\n")
    (tmp_path / "__main__.py").write_text("raise SystemExit('policy pack exploded')\n")
    with pytest.raises(PolicyPackError, match="failed to start") as failure:
        PolicyAnalyzer(tmp_path, project="p", stack="s").__enter__()
    assert "policy pack exploded" in str(failure.value)


@pytest.mark.parametrize(
    ("policy_yaml", "complaint"),
    [
        ("runtime: nodejs\n", "runtime must be python"),
        (
            "runtime:\n  name: python\n  options:\n    virtualenv: no-such-venv\n",
            "has no bin/python",
        ),
        ("runtime: [python\n", "not valid YAML"),
    ],
)
def test_bad_pulumipolicy_yaml_is_a_clear_error(tmp_path, policy_yaml, complaint):
    (tmp_path / "PulumiPolicy.yaml").write_text(policy_yaml)
    with pytest.raises(PolicyPackError, match=complaint):
        PolicyAnalyzer(tmp_path, project="p", stack="s").__enter__()


def test_readme_table_is_in_sync_with_the_pack():
    check = subprocess.run(
        [sys.executable, "-m", "spotctl.policy_pack", "--check"],
        cwd=PACK_DIR.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr


def test_any_python_pack_runs_with_the_stacks_config_and_its_output_shown(tmp_path):
    (tmp_path / "PulumiPolicy.yaml").write_text("runtime: python\nversion: 1.2.3\n")
    (tmp_path / "__main__.py").write_text(
        "import sys\n"
        "import pulumi.runtime\n"
        "from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy\n"
        "def region(args, report_violation):\n"
        "    print('checking', args.name, file=sys.stderr, flush=True)\n"
        "    report_violation('region is ' + pulumi.runtime.get_config('aws:region'))\n"
        "PolicyPack('tiny', [ResourceValidationPolicy('tiny-region', 'says the region', region,\n"
        "                                            EnforcementLevel.MANDATORY)])\n"
    )
    config = {"aws:region": "eu-north-1"}
    with PolicyAnalyzer(tmp_path, project="p", stack="s", stack_config=config) as pack:
        report = pack.analyze([resource("aws:sqs/queue:Queue", "q", {})])
    assert (report.pack, report.version) == ("tiny", "1.2.3")
    assert [(v.policy, v.level, v.message.splitlines()[-1]) for v in report.violations] == [
        ("tiny-region", "mandatory", "region is eu-north-1")
    ]
    assert "checking q" in report.logs
