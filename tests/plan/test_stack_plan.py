"""`spotctl plan --stack NAME --class C`: the class's instance type, region and capacity from the
stack, prices and interruption bands from the provider data table, the engineer's own figures as
visible overrides, and dollar figures that agree with the ratios."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from stack_files import REPO_ROOT, STACKS, stack_values
from typer.testing import CliRunner

from components.catalog import catalog
from components.config.loading import read_stack
from spotctl.cli import app
from spotctl.plan import band_rate, planned_interval
from spotctl.plan.stack_class import StackClassError
from spotctl.provider_data import DATA_FILE, ProviderDataError
from spotctl.provider_data import read as read_provider_data

JOB = ["--state-gb", "200", "--nodes", "4", "--step-s", "2", "--job-hours", "72"]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository, whose stacks --stack names."""
    monkeypatch.chdir(REPO_ROOT)


@pytest.fixture
def run(tmp_path: Path):
    """`spotctl plan ARGS`: its JSON and its console output, whitespace collapsed."""

    def plan(*args: str) -> tuple[dict, str]:
        out = tmp_path / "plan.json"
        result = CliRunner().invoke(
            app, ["plan", *args, "--json", str(out)], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
        return json.loads(out.read_text()), " ".join(result.output.split())

    return plan


@pytest.mark.parametrize(
    ("stack", "gpu_class", "extra", "expected"),
    [
        ("prod", "h100-80gb", [], ("aws", "us-west-2", "p5.48xlarge", 8)),
        ("prod", "h100-80gb", ["--instance-type", "p5.4xlarge"],
         ("aws", "us-west-2", "p5.4xlarge", 1)),
        ("dev", "a10g-24gb", ["--nodes", "1"], ("aws", "us-east-1", "g5.xlarge", 1)),
        ("gcp-prod", "h100-80gb", [], ("gcp", "us-central1", "a3-highgpu-8g", 8)),
    ],
)  # fmt: skip
def test_the_class_gives_the_instance_type_region_and_prices(
    run, stack: str, gpu_class: str, extra: list[str], expected: tuple
) -> None:
    cloud, region, instance_type, gpus = expected
    a, _ = run("--stack", stack, "--class", gpu_class, *JOB, *extra)
    a = a["assumptions"]
    assert (a["cloud"], a["region"], a["instance_type"], a["gpus_per_node"]) == expected
    row = read_provider_data().row(cloud, region, instance_type)
    assert (a["spot_price"], a["on_demand_price"]) == (row.spot, row.on_demand)
    config = next(c for c in stack_values(stack)["gpu_classes"] if c["name"] == gpu_class)
    assert a["capacity_gpus"] == {
        "spot": config["spot_gpus"],
        "on_demand": config["on_demand_gpus"],
    }


def test_an_aws_class_plans_at_its_types_advisor_band(run) -> None:
    plan, printed = run("--stack", "prod", "--class", "h100-80gb", *JOB)
    a = plan["assumptions"]
    assert a["provider_data"]["band"] == "15-20%"
    assert math.isclose(a["interruptions_per_node_hour"], band_rate("15-20%"))
    assert "the advisor's band for p5.48xlarge in us-west-2" in printed
    assert "provider-data.yaml: p5.48xlarge in us-west-2, read 2026-12-02" in printed


def test_a_gcp_class_plans_at_the_stated_assumption_and_says_so(run) -> None:
    data = read_provider_data()
    plan, printed = run("--stack", "gcp-prod", "--class", "h100-80gb", *JOB)
    a = plan["assumptions"]
    assert math.isclose(a["interruptions_per_node_hour"], band_rate(data.gcp_spot_band))
    assert f"{data.gcp_spot_band}: assumed for GCP Spot VMs: {data.gcp_spot_band_why}" in printed
    # The notice is the stack's (gcp.spot_shutdown), not GKE's default 15 s.
    notice = read_stack(REPO_ROOT, "gcp-prod", "--stack").notice_window()
    assert (a["notice_s"], a["notice_lag_s"]) == tuple(notice) != (15, 0)


def test_the_dollar_figures_agree_with_the_ratios(run) -> None:
    plan, printed = run("--stack", "prod", "--class", "h100-80gb", *JOB)
    a, nodes = plan["assumptions"], 4
    spot, on_demand = plan["spot_cost_usd"], plan["on_demand_cost_usd"]
    assert math.isclose(spot, plan["expected_hours"] * nodes * a["spot_price"])
    assert math.isclose(on_demand, plan["on_demand_hours"] * nodes * a["on_demand_price"])
    assert math.isclose(spot / on_demand, plan["expected_cost_ratio"])
    per_gpu = plan["spot_usd_per_trained_hour"], plan["on_demand_usd_per_trained_hour"]
    assert math.isclose(per_gpu[0] / per_gpu[1], plan["expected_cost_ratio"])
    assert math.isclose(per_gpu[0], a["spot_price"] / 8 / plan["expected_goodput"])
    assert f"│ job cost │ ${spot:,.0f} spot, ${on_demand:,.0f} on-demand │" in printed
    assert f"│ per GPU-hour trained │ ${per_gpu[0]:,.2f} spot, ${per_gpu[1]:,.2f} on-demand │" in (
        printed
    )


def test_without_a_class_the_figures_are_per_node_and_the_source_is_printed(run) -> None:
    plan, printed = run("--cloud", "aws", "--interruptions-per-hour", "0.05", *JOB)
    assert plan["trained_hour_unit"] == "node-hour"
    assert math.isclose(
        plan["spot_cost_usd"] / plan["on_demand_cost_usd"], plan["expected_cost_ratio"]
    )
    assert "the drill's defaults: AWS g5.xlarge, us-east-1" in printed


@pytest.mark.parametrize(
    ("override", "key", "value", "source"),
    [
        (["--spot-price", "30", "--on-demand-price", "60"], "spot_price", 30.0,
         "--spot-price, --on-demand-price, over the table's $18.16 spot and $55.04 on-demand for "
         "p5.48xlarge in us-west-2"),
        (["--interruptions-per-hour", "0.01"], "interruptions_per_node_hour", 0.01,
         "--interruptions-per-hour, over the table's 15-20% for p5.48xlarge in us-west-2"),
        (["--interruption-band", ">20%"], "interruptions_per_node_hour", band_rate(">20%"),
         "--interruption-band >20%, over the table's 15-20% for p5.48xlarge in us-west-2"),
    ],
)  # fmt: skip
def test_the_engineers_figures_override_the_table_visibly(
    run, override: list[str], key: str, value: float, source: str
) -> None:
    plan, printed = run("--stack", "prod", "--class", "h100-80gb", *JOB, *override)
    a = plan["assumptions"]
    assert math.isclose(a[key], value)
    assert source in printed
    assert source in (a["price_source"] if key == "spot_price" else a["interruption_rate_source"])


def provider_table_without(tmp_path: Path, cloud: str, region: str, instance_type: str) -> Path:
    document = yaml.safe_load(DATA_FILE.read_text())
    del document[cloud][region][instance_type]
    path = tmp_path / "provider-data.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


BAD = [
    (["--stack", "prod", "--class", "a100-40gb"],
     "--class a100-40gb: stack prod has no such GPU class; its classes: h100-80gb, l40s-48gb"),
    (["--cloud", "aws", "--class", "h100-80gb", "--interruption-band", "<5%"],
     "--class needs --stack"),
    (["--stack", "prod", "--class", "h100-80gb", "--instance-type", "g5.xlarge"],
     "--instance-type g5.xlarge: not a type of class h100-80gb in stack prod; its types: "
     "p5.48xlarge, p5.4xlarge"),
    (["--cloud", "aws", "--instance-type", "p5.48xlarge", "--interruption-band", "<5%"],
     "--instance-type needs --class"),
    (["--stack", "prod", "--class", "h100-80gb", "--nodes", "9"],
     "--nodes 9: 9 x p5.48xlarge is 72 GPUs, more than class h100-80gb's spot capacity in "
     "stack prod (spot_gpus: 64)"),
    (["--stack", "prod", "--class", "h100-80gb", "--cloud", "gcp"],
     "--stack prod is on aws, not gcp"),
    (["--stack", "nowhere", "--class", "h100-80gb"], "--stack nowhere: no stack 'nowhere'"),
    (["--interruption-band", "<5%"], "--cloud is required without --stack"),
    (["--cloud", "aws"], "give one of --interruptions-per-hour and --interruption-band, or "
     "--stack and --class"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), BAD)
def test_each_bad_input_is_one_line_naming_the_option(args: list[str], message: str) -> None:
    common = ["--state-gb", "10", "--step-s", "1", "--job-hours", "1"]
    result = CliRunner().invoke(app, ["plan", *common, *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_type_the_table_lacks_is_named_with_what_to_pass(tmp_path: Path) -> None:
    table = provider_table_without(tmp_path, "aws", "us-west-2", "p5.48xlarge")
    args = ["plan", *JOB, "--stack", "prod", "--class", "h100-80gb", "--provider-data", str(table)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert (
        "--class h100-80gb: the provider data table has no p5.48xlarge in us-west-2; add its "
        "row, or pass --interruptions-per-hour" in result.output
    )
    # With the engineer's own figures the plan needs no row.
    own = ["--interruptions-per-hour", "0.001", "--spot-price", "20", "--on-demand-price", "55"]
    assert CliRunner().invoke(app, [*args, *own]).exit_code == 0


def gpu_types_of(document: object, cloud: str) -> set[str]:
    """Every GPU instance type a stack's config names: its classes' and its pools'."""
    types = catalog(cloud).instance_types
    if isinstance(document, dict):
        found = set()
        for key, value in document.items():
            if key in ("instance_types", "machine_types", "machine_type"):
                names = value if isinstance(value, list) else [value]
                found |= {n for n in names if n in types and types[n].gpus}
            else:
                found |= gpu_types_of(value, cloud)
        return found
    if isinstance(document, list):
        return set().union(*(gpu_types_of(item, cloud) for item in document))
    return set()


@pytest.mark.parametrize("stack", STACKS)
def test_the_table_prices_every_gpu_type_each_stack_uses(stack: str) -> None:
    values = stack_values(stack)
    cloud, region = values["cloud"], values["region"]
    used = gpu_types_of(values, cloud)
    assert used >= {t for c in values["gpu_classes"] for t in c["instance_types"]}
    data = read_provider_data()
    missing = sorted(t for t in used if data.row(cloud, region, t) is None)
    assert not missing, f"provider-data.yaml has no {cloud} {region} row for {missing}"
    for name in used:
        row = data.row(cloud, region, name)
        assert 0 < row.spot < row.on_demand and row.sources
        assert (row.band is None) == (cloud == "gcp")
    # The memory tier's copies to a peer node share the type's network: every class type has it.
    classes = {t for c in values["gpu_classes"] for t in c["instance_types"]}
    unsourced = sorted(t for t in classes if data.network_gbps(cloud, t) is None)
    assert not unsourced, f"provider-data.yaml has no {cloud} network figure for {unsourced}"


def test_a_network_figure_names_a_source_the_table_has(tmp_path: Path) -> None:
    document = yaml.safe_load(DATA_FILE.read_text())
    document["network"]["gcp"]["source"] = "nowhere"
    path = tmp_path / "provider-data.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ProviderDataError, match=r"network\.gcp\.source: 'nowhere' is not in"):
        read_provider_data(path)
    document["network"]["gcp"]["source"] = "gce-network"
    document["network"]["gcp"]["gbps"]["g2-standard-8"] = 0
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ProviderDataError, match=r"gbps\.g2-standard-8 must be a positive number"):
        read_provider_data(path)


def test_planned_interval_is_the_commands_interval(run) -> None:
    plan, _ = run("--stack", "prod", "--class", "h100-80gb", *JOB)
    given = planned_interval("prod", "h100-80gb", 200, nodes=4, step_s=2, job_hours=72)
    assert given.interval_s == plan["interval_s"] and given.interval_steps == plan["interval_steps"]
    assert given.memory_tier == plan["memory_tier"]
    assert given.inputs["instance_type"] == "p5.48xlarge"
    assert (
        given.inputs["interruption_rate_source"] == plan["assumptions"]["interruption_rate_source"]
    )
    # A bigger state saves for longer: the interval grows with it (Young/Daly's sqrt(2CM)).
    assert planned_interval("prod", "h100-80gb", 800, nodes=4).interval_s > given.interval_s
    with pytest.raises(StackClassError, match="^--class a100-40gb: stack prod has no such"):
        planned_interval("prod", "a100-40gb", 200)
