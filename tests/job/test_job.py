"""`spotctl job` writes a team's Job from its stack's own template spec, on one node or several,
for an AWS and a GCP stack: it passes the checks of `spotctl render --validate` (schemas, the
stack's admission policies as deployed, the nodes' device plugins), carries the team's queue,
priority, placement, notice and checkpoint prefix, and saves at the planner's interval. Every
refusal is one line naming its flag."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from stack_files import REPO_ROOT, stack_values
from typer.testing import CliRunner

from components.config import load_config
from components.k8s.jobs import PREEMPTED_EXIT_CODE, SHM_GIB
from spotctl.cli import app
from spotctl.job.manifest import Written, problems, write_job
from spotctl.job.memory import Room, room
from spotctl.job.plan import node_type, plan_run
from spotctl.job.request import JobError, Request, place
from spotctl.plan import planned_interval
from spotctl.plan.costs import GB_PER_GIB
from spotctl.preview.aws import ACCOUNT_ID
from spotctl.render.manifests import Rendered, render

DIGEST = "sha256:" + "0" * 64
# The account the AWS stack is deployed in, which its preview cannot know.
DEPLOYED_ACCOUNT = "444455556666"
STATE_GIB, STEP_S, JOB_HOURS = 1.0, 1.5, 24.0
COMMAND = ("python", "-m", "spotsafe.examples.train", "--steps", "1000")


@pytest.fixture(scope="module")
def stacks(stack_previews) -> dict:
    """stack -> (its preview, rendered)."""
    found = {}
    for stack in ("dev", "gcp-dev"):
        resources = stack_previews(stack)
        found[stack] = (resources, render(resources))
    return found


def image_of(rendered: Rendered) -> str:
    """An image in the stack's repository, as pushed to the deployed stack's registry."""
    template = next(iter(rendered.templates.values()))[0]
    repository = template["spec"]["template"]["spec"]["containers"][0]["image"].split("@")[0]
    return f"{repository.replace(ACCOUNT_ID, DEPLOYED_ACCOUNT)}@{DIGEST}"


def write(
    stacks: dict,
    stack: str,
    nodes: int = 1,
    memory_tier: str = "auto",
    state_gib: float = STATE_GIB,
    **changes,
) -> tuple:
    """(config, the Job written, the interval planned, the stack rendered)."""
    resources, rendered = stacks[stack]
    settings = load_config(stack_values(stack))
    request = Request(
        **{
            "name": "first-run",
            "image": image_of(rendered),
            "command": COMMAND,
            "nodes": nodes,
            "bucket": "team-checkpoints",
            **changes,
        }
    )
    placed = place(settings, stack, request)
    plan, tier = plan_run(
        settings, stack, REPO_ROOT, placed, nodes, state_gib, STEP_S, JOB_HOURS, memory_tier
    )
    tier = None if isinstance(tier, str) else tier
    written = write_job(settings, resources, rendered, request, placed, plan, tier)
    return settings, written, plan, rendered


def env_of(job: dict) -> dict:
    [container] = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


CASES = [("dev", 1), ("dev", 3), ("gcp-dev", 1), ("gcp-dev", 3)]


@pytest.mark.parametrize(("stack", "nodes"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_the_job_passes_the_stacks_checks_and_carries_its_regime(
    stacks: dict, stack: str, nodes: int
) -> None:
    settings, written, _, rendered = write(stacks, stack, nodes)
    assert problems(rendered, written) == []
    job, [team] = written.job, settings.teams
    pod = job["spec"]["template"]["spec"]
    [queue] = [
        q
        for q in rendered.objects
        if q["kind"] == "LocalQueue" and q["metadata"]["namespace"] == team.namespace
    ]
    assert job["metadata"]["namespace"] == team.namespace
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue["metadata"]["name"]
    assert pod["priorityClassName"] == settings.kubernetes.templates.priority_class
    assert pod["priorityClassName"] in {
        o["metadata"]["name"] for o in rendered.objects if o["kind"] == "PriorityClass"
    }
    # The class's spot flavor selects the nodes the pod selects, and the pod tolerates them.
    [gpu_class] = settings.gpu_classes
    [flavor] = [
        f
        for f in rendered.objects
        if f["kind"] == "ResourceFlavor" and f["metadata"]["name"] == f"{gpu_class.name}-spot"
    ]
    assert pod["nodeSelector"].items() <= flavor["spec"]["nodeLabels"].items()
    assert all(t in pod["tolerations"] for t in flavor["spec"].get("tolerations", []))
    assert pod["terminationGracePeriodSeconds"] == settings.notice_window().grace_s
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert {"type": "DisruptionTarget", "status": "True"} in rules[0]["onPodConditions"]
    assert rules[1]["onExitCodes"]["values"] == [PREEMPTED_EXIT_CODE]
    assert all(rule["action"] == "Ignore" for rule in rules)
    scheme = "s3" if settings.cloud == "aws" else "gs"
    expected_uri = f"{scheme}://team-checkpoints/{team.checkpoint_prefix}/$(RUN_NAME)"
    assert env_of(job)["CHECKPOINT_URI"] == expected_uri
    command = pod["containers"][0]["command"]
    assert tuple(command[-len(COMMAND) :]) == COMMAND
    if nodes == 1:
        assert "completions" not in job["spec"]
    else:
        assert job["spec"]["completions"] == job["spec"]["parallelism"] == nodes
        assert command[0] == "spotsafe-run" and f"--nnodes={nodes}:{nodes}" in command


def test_a_job_off_the_stacks_regime_is_found_invalid(stacks: dict) -> None:
    """The checks bite: a grace shorter than the notice, a lost podFailurePolicy, a GPU no
    device plugin serves and a field Kubernetes does not know each come back."""
    _, written, _, rendered = write(stacks, "dev")
    job = json.loads(json.dumps(written.job))
    pod = job["spec"]["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = 30
    del job["spec"]["podFailurePolicy"]
    pod["containers"][0]["resources"]["limits"]["example.com/tpu"] = "1"
    pod["containers"][0]["imagePullPolicies"] = "Always"
    found = " ".join(problems(rendered, Written(job, written.deployed)))
    for expected in ("terminationGracePeriodSeconds", "DisruptionTarget", "example.com/tpu"):
        assert expected in found
    assert "imagePullPolicies" in found


def test_the_preview_bucket_is_read_as_the_deployed_one(stacks: dict) -> None:
    """The stack's checkpoint-prefix policy names the preview's bucket; read as deployed it
    names --bucket, so the Job passes, and a Job in the preview's bucket does not."""
    _, written, _, rendered = write(stacks, "dev")
    [(preview_bucket, bucket)] = [(k, v) for k, v in written.deployed.items() if "." not in k]
    assert bucket == "team-checkpoints" and preview_bucket != bucket
    text = json.dumps(written.job).replace("team-checkpoints", "elsewhere-bucket")
    found = problems(rendered, Written(json.loads(text), written.deployed))
    assert any("CHECKPOINT_URI" in problem for problem in found), found


def test_one_node_of_the_template_class_is_the_teams_own_template(stacks: dict) -> None:
    """Asked for what the team's single-node template holds, it writes that template, with the
    planned interval for the command to save by."""
    _, rendered = stacks["dev"]
    [((namespace, _), [template])] = [
        (key, docs) for key, docs in rendered.templates.items() if key[1] == "single-node.yaml"
    ]
    container = template["spec"]["template"]["spec"]["containers"][0]
    bucket = env_of(template)["CHECKPOINT_URI"].split("/")[2]
    _, written, plan, _ = write(
        stacks,
        "dev",
        name=template["metadata"]["name"],
        image=container["image"],
        command=tuple(container["command"]),
        bucket=bucket,
    )
    job = json.loads(json.dumps(written.job))
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    planned_env = [e for e in env if e["name"].startswith("CHECKPOINT_") and "URI" not in e["name"]]
    assert planned_env == [
        {"name": "CHECKPOINT_INTERVAL_S", "value": str(round(plan.interval_s))},
        {"name": "CHECKPOINT_EVERY_STEPS", "value": str(plan.interval_steps)},
    ]
    for entry in planned_env:
        env.remove(entry)
    assert job == template


@pytest.mark.parametrize(("stack", "nodes"), CASES, ids=[f"{s}-{n}" for s, n in CASES])
def test_the_intervals_are_the_planners_for_the_stack(
    stacks: dict, stack: str, nodes: int, tmp_path: Path
) -> None:
    """The Job saves at the interval `spotctl plan` gives the run, with the memory tier only
    where the plan finds that it pays."""
    settings, written, _, _ = write(stacks, stack, nodes)
    [gpu_class] = settings.gpu_classes  # the one class each of these stacks has
    env = env_of(written.job)
    [container] = written.job["spec"]["template"]["spec"]["containers"]
    pod_gib = int(container["resources"]["requests"]["memory"].removesuffix("Gi"))
    node = node_type(settings, gpu_class, 1, pod_gib)  # the Job's pods ask for one GPU here
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "--stack",
            stack,
            "--class",
            gpu_class.name,
            "--instance-type",
            node,
            "--program",
            str(REPO_ROOT),
            "--state-gb",
            str(STATE_GIB * GB_PER_GIB),
            "--step-s",
            str(STEP_S),
            "--job-hours",
            str(JOB_HOURS),
            "--nodes",
            str(nodes),
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(out.read_text())
    tiers = plan["memory_tier"]
    assert tiers["applies"] == (nodes > 1)
    # A memory save blocks at least what the durable snapshot does, and uploads are short
    # against the interval: the two tiers do not pay here, and the Job saves at the durable
    # interval.
    assert not tiers.get("pays") and "SPOTSAFE_MEMORY_EVERY_STEPS" not in env
    assert env["CHECKPOINT_INTERVAL_S"] == str(round(plan["interval_s"]))
    assert env["CHECKPOINT_EVERY_STEPS"] == str(plan["interval_steps"])


@pytest.mark.parametrize("stack", ["dev", "gcp-dev"])
def test_the_memory_tier_has_room_for_its_copies(stacks: dict, stack: str) -> None:
    """Each local rank keeps up to six copies of its whole state in the tmpfs at /dev/shm and one
    in its staging buffers: /dev/shm grows by the six, the pod's memory (which the tmpfs counts
    against) by all seven, the pod lands on a type that holds it, and it saves at both tiers'
    intervals; the Job still passes the stack's checks."""
    settings, written, plan, rendered = write(stacks, stack, 3, memory_tier="on")
    _, alone, _, _ = write(stacks, stack, 3, memory_tier="off")
    assert problems(rendered, written) == []
    [gpu_class] = settings.gpu_classes

    def pod_of(job: dict) -> tuple[int, int, dict]:
        pod = job["spec"]["template"]["spec"]
        [shm] = [v for v in pod["volumes"] if v["name"] == "shm"]
        [container] = pod["containers"]
        resources = container["resources"]
        assert resources["requests"]["memory"] == resources["limits"]["memory"]
        assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        gib = int(resources["limits"]["memory"].removesuffix("Gi"))
        return gib, int(shm["emptyDir"]["sizeLimit"].removesuffix("Gi")), env_of(job)

    memory, shm, env = pod_of(written.job)
    memory_alone, shm_alone, env_alone = pod_of(alone.job)
    assert shm_alone == SHM_GIB and memory_alone == gpu_class.memory_gib_per_gpu
    assert shm - shm_alone == math.ceil(6 * STATE_GIB)
    assert memory - memory_alone == math.ceil(7 * STATE_GIB)
    assert "SPOTSAFE_MEMORY_EVERY_STEPS" not in env_alone
    tiers = plan.memory_tier
    assert env["SPOTSAFE_MEMORY_EVERY_STEPS"] == str(tiers["memory_interval_steps"])
    assert env["CHECKPOINT_EVERY_STEPS"] == str(tiers["durable_interval_steps"])
    assert env["CHECKPOINT_INTERVAL_S"] == str(round(tiers["durable_interval_s"]))
    # The pod outgrows the smallest type and is planned for the one it lands on.
    assert node_type(settings, gpu_class, 1, memory) != node_type(settings, gpu_class, 1)


def test_a_memory_tier_no_node_or_quota_holds_is_refused_naming_its_flags(stacks: dict) -> None:
    # 7 x 8 GiB beside the pod's 12: more than dev's largest a10g type, g5.4xlarge, holds.
    with pytest.raises(JobError) as refused:
        write(stacks, "dev", 3, memory_tier="on", state_gib=8.0)
    assert re.fullmatch(
        r"--state-gib 8: the memory tier keeps up to 7 copies of each rank's 8 GiB, 56 GiB "
        r"a pod of 1 rank\(s\) beside its 12 GiB, more than a g5\.4xlarge node holds \(\d+ GiB\); "
        r"checkpoint less state, or pass --memory-tier off",
        str(refused.value),
    )
    # 40 GiB pods fit g5.4xlarge, but three exceed the team's 60 GiB of a10g memory.
    with pytest.raises(JobError, match=r"^--state-gib 4: .*") as refused:
        write(stacks, "dev", 3, memory_tier="on", state_gib=4.0)
    assert str(refused.value).endswith(
        "120 GiB over 3 nodes exceed team research's memory quota of a10g-24gb, 60 GiB: Kueue "
        "would never admit it; checkpoint less state, or pass --memory-tier off"
    )
    # Where the plan decides (auto), a tier that does not pay is left out, not refused.
    assert "SPOTSAFE_MEMORY_EVERY_STEPS" not in env_of(
        write(stacks, "dev", 3, state_gib=8.0)[1].job
    )


def test_the_memory_tier_keeps_a_whole_state_or_each_ranks_shard_on_several_nodes() -> None:
    settings = load_config(stack_values("gcp-dev"))
    [team], [l4] = settings.teams, settings.gpu_classes
    assert room(settings, team, l4, 1, 1, 1.0).startswith("one node")
    whole = room(settings, team, l4, 1, 3, 3.0)  # fits a 24 GiB GPU: replicated (DDP)
    sharded = room(settings, team, l4, 1, 3, 30.0)  # does not: 10 GiB a rank (FSDP)
    assert isinstance(whole, Room) and isinstance(sharded, Room)
    assert (whole.shelf_gib, whole.memory_gib) == (6 * 3, 7 * 3)
    assert (sharded.shelf_gib, sharded.memory_gib) == (6 * 10, 7 * 10)


def test_an_image_outside_the_stacks_repositories_is_refused(stacks: dict) -> None:
    with pytest.raises(JobError, match=r"^--image .*not from the stack's image repositories"):
        write(stacks, "gcp-dev", image=f"europe-west4-docker.pkg.dev/other/repo@{DIGEST}")


def test_a_stack_that_names_its_bucket_needs_no_bucket_flag() -> None:
    settings = load_config(stack_values("dev"))
    storage = settings.aws.checkpoint_storage.model_copy(update={"bucket_name": "dev-ckpt"})
    named = settings.model_copy(
        update={"aws": settings.aws.model_copy(update={"checkpoint_storage": storage})}
    )
    request = Request("first-run", f"trainer@{DIGEST}", COMMAND)
    assert place(named, "dev", request).bucket is None  # the preview's bucket is the real one
    with pytest.raises(
        JobError, match=r"^--bucket other: the stack's checkpoint bucket is dev-ckpt"
    ):
        place(named, "dev", Request("first-run", f"trainer@{DIGEST}", COMMAND, bucket="other"))
    with pytest.raises(JobError, match=r"^--bucket is required"):
        place(settings, "dev", request)


BASE = ["job", "--program", str(REPO_ROOT), "--name", "first-run", "--state-gib", "4"]
RUN = ["--step-s", "1", "--bucket", "team-checkpoints"]
IMAGE = ["--image", f"{DEPLOYED_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/trainer@{DIGEST}"]
DEV = ["--stack", "dev", *RUN, *IMAGE]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stack", "nope", *RUN, *IMAGE, "--", "x"], "--stack nope: "),
        ([*DEV, "--team", "nlp", "--", "x"], "--team nlp: not a team of stack dev (teams: "),
        ([*DEV, "--class", "h100", "--", "x"], "--class h100: not a GPU class of stack dev"),
        (
            ["--stack", "prod", *RUN, *IMAGE, "--team", "vision", "--class", "h100-80gb", "x"],
            "--class h100-80gb: team vision has no quota of it (its classes: l40s-48gb)",
        ),
        (["--stack", "dev", *RUN, "--image", "trainer:latest", "x"], "--image 'trainer:latest'"),
        ([*DEV, "--nodes", "6", "--", "x"], "--nodes 6: 6 GPUs (6 nodes x 1) exceed team research"),
        ([*DEV, "--nodes", "0", "--", "x"], "--nodes must be at least 1"),
        ([*DEV, "--gpus-per-node", "2", "--", "x"], "--gpus-per-node 2: no instance type"),
        ([*DEV, "--state-gib", "900", "--", "x"], "--state-gib 900: a final save of each node"),
        (
            [*DEV, "--nodes", "3", "--memory-tier", "on", "--state-gib", "8", "--", "x"],
            "--state-gib 8: the memory tier keeps up to 7 copies",
        ),
        ([*DEV, "--step-s", "0", "--", "x"], "--step-s must be a positive number"),
        ([*DEV, "--name", "First_Run", "--", "x"], "--name 'First_Run': not a Job name"),
        (DEV, "--command: give the training command"),
        ([*DEV, "--command", "x", "--", "y"], "--command: give the command once"),
        ([*DEV, "--command", "x 'y"], '--command "x \'y": '),
        (["--stack", "dev", "--step-s", "1", *IMAGE, "x"], "--bucket is required"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_refusal_is_one_line_naming_its_flag(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, [*BASE, *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_the_cli_prints_the_job_or_writes_it(stacks: dict, tmp_path: Path) -> None:
    _, written, plan, _ = write(stacks, "gcp-dev", 2)
    image = image_of(stacks["gcp-dev"][1])
    words = ["--stack", "gcp-dev", "--nodes", "2", "--image", image, *RUN, "--step-s", str(STEP_S)]
    words += ["--state-gib", str(STATE_GIB), "--", *COMMAND]
    printed = CliRunner().invoke(app, [*BASE, *words])
    assert printed.exit_code == 0, printed.output
    assert yaml.safe_load(printed.stdout) == written.job
    summary = printed.stderr.splitlines()[-1]
    assert summary.startswith("indexed Job team-vision/first-run: 2 nodes of 1 l4-24gb GPUs")
    assert f"checkpoint every {plan.interval_steps} steps" in summary
    assert "; no memory tier: it does not pay here: badput " in summary
    out = tmp_path / "job.yaml"
    written_out = CliRunner().invoke(app, [*BASE, "-o", str(out), *words])
    assert written_out.exit_code == 0 and written_out.stdout == ""
    assert yaml.safe_load(out.read_text()) == written.job


def test_the_interval_is_planned_for_the_node_the_pods_are_packed_on() -> None:
    # prod's H100 class has an 8-GPU and a 1-GPU type: a pod of one GPU lands on the small one,
    # whose band and prices the run meets, and whose GPUs count against the spot capacity.
    settings = load_config(stack_values("prod"))
    h100 = next(c for c in settings.gpu_classes if c.name == "h100-80gb")
    assert node_type(settings, h100, 8) == "p5.48xlarge"
    assert node_type(settings, h100, 1) == "p5.4xlarge"
    nine = planned_interval(
        "prod",
        h100.name,
        1.0,
        nodes=9,
        step_s=STEP_S,
        instance_type="p5.4xlarge",
        program=REPO_ROOT,
    )
    assert nine.interval_steps >= 1  # 9 one-GPU nodes fit the class's spot GPUs; 9 of 8 would not
