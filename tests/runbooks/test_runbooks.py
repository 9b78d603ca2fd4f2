"""Runbooks that run: every command in a runbook is run here or checked against the reference of
what the CLIs, the stack and the exporters offer; and the checker catches each way a runbook
command has gone wrong before."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from datetime import date
from pathlib import Path

import prometheus_client
import pytest
import yaml
from runbook_checker import (
    check_command,
    check_metrics,
    check_runbook,
    commands_in,
    promql_queries,
    refused,
    runbook_commands,
    shell_commands,
)

from spotctl.review.runbooks import REPO, Runbook, RunbookError, all_runbooks, load_runbook

RUNBOOKS = all_runbooks()
SAMPLES = Path(__file__).parent / "samples"
TODAY = date.today()


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=lambda r: r.relative)
def test_runbook_commands_fit_the_platform(runbook: Runbook) -> None:
    assert runbook_commands(runbook), f"{runbook.relative}: no commands"
    assert check_runbook(runbook, TODAY) == []


@pytest.mark.parametrize("doc", ["docs/operations.md"])
def test_doc_commands_fit_the_platform(doc: str) -> None:
    text = (REPO / doc).read_text()
    commands = commands_in(text, doc)
    assert commands, f"{doc}: no commands"
    assert refused(text) + [p for c in commands for p in check_command(c)] == []


def test_every_runbook_carries_last_reviewed(tmp_path: Path) -> None:
    assert all(r.last_reviewed <= TODAY for r in RUNBOOKS)
    stale = tmp_path / "Stale.md"
    stale.write_text("# Stale\n")
    with pytest.raises(RunbookError, match="no front matter"):
        load_runbook(stale, root=tmp_path)
    stale.write_text("---\nlast_reviewed: soon\n---\n# Stale\n")
    with pytest.raises(RunbookError, match="last_reviewed must be a date"):
        load_runbook(stale, root=tmp_path)


def problems_of(line: str) -> list[str]:
    commands = shell_commands("runbooks/Example.md", line)
    return refused(line) + [problem for c in commands for problem in check_command(c)]


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        (
            "kubectl -n team get job run -o yaml > run.yaml && kubectl replace --force -f run.yaml",
            "generated selector",
        ),
        ("kubectl -n team logs pod-1 --previous | grep final", "restartPolicy Never"),
        ("aws cloudwatch get-metric-statistics --start-time \"$(date -u -d '-1 hour')\"", "GNU"),
        ("kubectl describe nodes | grep -A6 'Allocated resources'", "nvidia.com/gpu"),
        ("aws cloudtrail lookup-events --max-results 5", "data events"),
        ("kubectl get nodes --show-taints", "unknown flag --show-taints"),
        ("kubectl get gadgets", "'gadgets' is not an object"),
        ("kubectl frobnicate pods", "not in runbooks/cli-reference.yaml"),
        ("aws ec2 terminate-instances --instance-ids i-1", "aws ec2 terminate-instances"),
        ("gcloud logging read --freshness 1h --limitt 5", "unknown flag --limitt"),
        ('aws sqs get-queue-url --queue-url "$(pulumi stack output queue_url)"', "no 'queue_url'"),
        ("spotctl plan --cloud aws --state-gigs 4", "No such option"),
        ("jq .items", "not a program the runbook checker knows"),
    ],
)
def test_the_checker_catches_a_broken_command(line: str, complaint: str) -> None:
    assert any(complaint in problem for problem in problems_of(line)), problems_of(line)


def test_the_checker_catches_an_unknown_metric() -> None:
    runbook = Runbook(Path("X.md"), TODAY, "`spotsafe_checkpoint_age_seconds`, `spotsafe_goodput`")
    assert check_metrics(runbook) == [
        "metric spotsafe_goodput is exported by neither the runtime nor a named exporter"
    ]


def test_runbook_promql_parses() -> None:
    queries = [q for runbook in RUNBOOKS for q in promql_queries(runbook)]
    assert queries, "no runbook queries Prometheus"
    assert shutil.which("promtool"), "promtool missing: apt-get install -y prometheus"
    rules = {"groups": [{"name": "runbooks", "rules": []}]}
    for n, query in enumerate(queries):
        rules["groups"][0]["rules"].append({"record": f"runbook:query_{n}", "expr": query})
    checked = _promtool_check(rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules["groups"][0]["rules"].append({"record": "runbook:broken", "expr": "sum(rate(x[5m])"})
    assert _promtool_check(rules).returncode != 0


def _promtool_check(rules: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["promtool", "check", "rules", "/dev/stdin"],
        input=yaml.safe_dump(rules),
        capture_output=True,
        text=True,
        timeout=60,
    )


def runtime_metrics() -> str:
    """What the runtime's metrics endpoint serves."""
    import spotsafe.metrics  # noqa: F401  (registers the runtime's metrics)

    return prometheus_client.generate_latest().decode()


def described_gpu_node() -> str:
    """`kubectl describe nodes` of a busy GPU node, as kubectl v1.35 prints it."""
    return (SAMPLES / "kubectl-describe-nodes.txt").read_text()


# Producers of a pipeline's input that run here, or whose output is recorded, and what a filter
# of their output is there to find.
PRODUCERS = {
    ("curl", "-s", "localhost:9400/metrics"): (runtime_metrics, "spotsafe_"),
    ("kubectl", "describe", "nodes"): (described_gpu_node, "nvidia.com/gpu"),
}


def fed_pipelines() -> list:
    """(runbook, the pipeline's filters, producer) for every pipeline with a producer here."""
    found = {}
    for runbook in RUNBOOKS:
        for command in runbook_commands(runbook):
            head, *filters = command.pipeline
            for prefix, producer in PRODUCERS.items():
                if head[: len(prefix)] == prefix and filters:
                    found[(runbook.relative, command.line)] = (filters, producer)
    return [(where, *value) for where, value in found.items()]


FED = fed_pipelines()


def test_pipelines_are_fed_where_they_can_be() -> None:
    assert {producer for _, _, producer in FED} == set(PRODUCERS.values())


def test_a_window_that_ends_too_soon_finds_nothing() -> None:
    script = "grep -A6 'Allocated resources' | grep nvidia.com/gpu"
    result = subprocess.run(
        ["bash", "-c", script],
        input=described_gpu_node(),
        text=True,
        capture_output=True,
        timeout=30,
    )
    assert result.stdout == ""


@pytest.mark.parametrize(("where", "filters", "producer"), FED, ids=[w[1][:60] for w, *_ in FED])
def test_pipeline_finds_its_lines(where, filters, producer) -> None:
    produce, wanted = producer
    script = " | ".join(shlex.join(stage) for stage in filters)
    result = subprocess.run(
        ["bash", "-c", script], input=produce(), capture_output=True, text=True, timeout=30
    )
    assert wanted in result.stdout, f"{where[0]}: {where[1]} does not find {wanted}"
