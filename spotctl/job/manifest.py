"""A team's training Job, written from its stack's own templates and checked as `spotctl render
--validate` checks the stack.

The stack's preview records the spec each team's template ConfigMap is rendered from
(`components.k8s.templates`); the run is that spec on the GPU class, GPUs, nodes, image, command
and checkpoint interval asked for, rendered by the same functions (`components.k8s.jobs`): one
node is a plain Job, several an indexed Job of `spotsafe-run` agents.

Two values of a stack are known only once it is deployed: the checkpoint bucket's name, unless
the stack fixes it, and the AWS account in the image repository's host. The run names them
(`--bucket`, the `--image` reference), and the stack's admission policies are read as deployed
with them before the run is checked against them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from components.catalog import catalog
from components.config import StackConfig
from components.config.capacity import allocatable, efa_interfaces, template_class
from components.config.stack import GpuClass, Team
from components.k8s.jobs import (
    TrainingJobSpec,
    class_fields,
    multi_node_job,
    single_node_job,
    spec_from_document,
)
from components.versions import KUBERNETES_VERSION
from spotctl.job.interval import Planned
from spotctl.preview.aws import ACCOUNT_ID
from spotctl.preview.resources import PreviewResource
from spotctl.render.manifests import (
    Rendered,
    admission_problems,
    plain,
    scheduling_problems,
    validate,
)

TEMPLATES_COMPONENT = "spot:templates:JobTemplates"
DIGEST_REFERENCE = re.compile(r"(?P<repository>[a-z0-9][a-z0-9.:/_-]*)@sha256:[0-9a-f]{64}")
# A Job's name is also the value of its pods' job-name label: a DNS label.
JOB_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class JobError(ValueError):
    """A run the stack cannot take; the message names the flag."""


@dataclass(frozen=True)
class Request:
    """What the engineer asks for, as the flags give it."""

    name: str
    image: str
    command: tuple[str, ...]
    nodes: int = 1
    team: str | None = None
    gpu_class: str | None = None
    gpus_per_node: int | None = None
    bucket: str | None = None


@dataclass(frozen=True)
class Placed:
    """The request resolved against the stack's config."""

    team: Team
    gpu_class: GpuClass
    gpus_per_node: int
    bucket: str | None  # the deployed bucket, where the stack does not fix it


def place(settings: StackConfig, stack: str, request: Request) -> Placed:
    """Check the request against the stack's config, before any preview; JobError names the
    flag of the first problem."""
    if not JOB_NAME.fullmatch(request.name):
        raise JobError(
            f"--name {request.name!r}: not a Job name (lowercase letters, digits and '-', at "
            "most 63, starting and ending with a letter or digit)"
        )
    if not request.command:
        raise JobError("--command: give the training command, as --command '...' or after --")
    if not DIGEST_REFERENCE.fullmatch(request.image):
        raise JobError(
            f"--image {request.image!r}: not pinned by digest (REPOSITORY@sha256:<64 hex>); an "
            "exact resume needs the exact image that wrote the checkpoint"
        )
    team = _team(settings, stack, request.team)
    gpu_class = _gpu_class(settings, stack, team, request.gpu_class)
    gpus = _gpus_per_node(settings, gpu_class, request.gpus_per_node)
    if request.nodes < 1:
        raise JobError(f"--nodes must be at least 1, not {request.nodes}")
    quota = team.quotas[gpu_class.name]
    borrow = settings.kubernetes.kueue.borrow_spot_gpus
    allowed = quota.spot_gpus + quota.on_demand_gpus + borrow
    if request.nodes * gpus > allowed:
        raise JobError(
            f"--nodes {request.nodes}: {request.nodes} nodes of {gpus} GPUs exceed team "
            f"{team.name}'s quota of {gpu_class.name}, {allowed} GPUs (spot {quota.spot_gpus}, "
            f"on-demand {quota.on_demand_gpus}, borrowed {borrow}): Kueue would never admit it"
        )
    return Placed(team, gpu_class, gpus, _bucket(settings, request.bucket))


def _team(settings: StackConfig, stack: str, name: str | None) -> Team:
    teams = {team.name: team for team in settings.teams}
    if name is None and len(teams) == 1:
        return settings.teams[0]
    if name not in teams:
        given = "--team is required" if name is None else f"--team {name}: not a team"
        raise JobError(f"{given} of stack {stack} (teams: {', '.join(teams)})")
    return teams[name]


def _gpu_class(settings: StackConfig, stack: str, team: Team, name: str | None) -> GpuClass:
    if name is None:
        name = template_class(settings, settings.teams.index(team))
    classes = {c.name: c for c in settings.gpu_classes}
    if name not in classes:
        raise JobError(
            f"--class {name}: not a GPU class of stack {stack} (classes: {', '.join(classes)})"
        )
    if name not in team.quotas:
        raise JobError(
            f"--class {name}: team {team.name} has no quota of it (its classes: "
            f"{', '.join(team.quotas)})"
        )
    return classes[name]


def _gpus_per_node(settings: StackConfig, gpu_class: GpuClass, asked: int | None) -> int:
    """The GPUs a pod asks for: by default all that every type of the class carries. A pod of
    more must still fit, with its CPU and memory, one type after what the node keeps."""
    types = [catalog(settings.cloud).instance_types[name] for name in gpu_class.instance_types]
    gpus = min(t.gpus for t in types) if asked is None else asked
    if gpus < 1:
        raise JobError(f"--gpus-per-node must be at least 1, not {gpus}")
    millicpu, memory_gib = gpus * gpu_class.cpu_per_gpu * 1000, gpus * gpu_class.memory_gib_per_gpu
    room = [allocatable(t, settings.cloud) for t in types]
    if not any(
        a.gpus >= gpus and a.millicpu >= millicpu and a.memory_mib >= memory_gib * 1024
        for a in room
    ):
        offers = ", ".join(f"{t.name} {a.gpus}" for t, a in zip(types, room, strict=True))
        raise JobError(
            f"--gpus-per-node {gpus}: no instance type of class {gpu_class.name} fits a pod of "
            f"{gpus} GPUs with {millicpu // 1000} CPU and {memory_gib} GiB (GPUs per type: "
            f"{offers})"
        )
    return gpus


def _bucket(settings: StackConfig, given: str | None) -> str | None:
    storage = (settings.aws or settings.gcp).checkpoint_storage
    if storage.bucket_name is None and given is None:
        raise JobError(
            "--bucket is required: the stack's checkpoint bucket is named when it is created; "
            "`pulumi stack output checkpoint_bucket` prints it"
        )
    if storage.bucket_name is not None and given not in (None, storage.bucket_name):
        raise JobError(
            f"--bucket {given}: the stack's checkpoint bucket is {storage.bucket_name} "
            "(checkpoint_storage.bucket_name)"
        )
    return given


def final_save_fits(planned: Planned, state_gib: float, nodes: int) -> None:
    """A notice must leave the final save of a node's shard time to finish, after the step in
    progress; otherwise every preemption loses the work since the last checkpoint."""
    job = planned.job
    if not job.final_save_fits:
        raise JobError(
            f"--state-gib {state_gib:g}: a final save of each node's {state_gib / nodes:g} GiB "
            f"takes about {job.save_s:.0f} s after a {job.step_s:g} s step, more than the "
            f"{job.notice_s:g} s the stack's notice leaves it; spread the state over more nodes "
            "(--nodes) or checkpoint less of it"
        )


def team_spec(resources: list[PreviewResource], team: Team) -> tuple[TrainingJobSpec, str | None]:
    """The spec of the team's templates as the stack's preview built it, and the label its
    placement selects a class by."""
    for resource in resources:
        if resource.type != TEMPLATES_COMPONENT:
            continue
        recorded = plain(resource.inputs, f"{resource.type} {resource.name}")
        if recorded["spec"]["namespace"] == team.namespace:
            return spec_from_document(recorded["spec"]), recorded.get("computeClassLabel")
    raise JobError(f"--team {team.name}: the stack renders no Job templates for it")


@dataclass(frozen=True)
class Written:
    job: dict
    # Values the stack's preview stands in for, and the deployed ones the run names.
    deployed: dict[str, str]


def write_job(
    settings: StackConfig,
    resources: list[PreviewResource],
    rendered: Rendered,
    request: Request,
    placed: Placed,
    planned: Planned,
) -> Written:
    """The team's Job for the request, from the spec of its templates."""
    spec, compute_class_label = team_spec(resources, placed.team)
    deployed = {}
    root = spec.checkpoint_root
    if placed.bucket is not None:
        preview_bucket = root.split("/")[2]
        deployed[preview_bucket] = placed.bucket
        root = root.replace(preview_bucket, placed.bucket, 1)
    deployed.update(_repository(rendered, request.image))
    spec = replace(
        spec,
        name=request.name,
        image=request.image,
        command=request.command,
        checkpoint_root=root,
        checkpoint_interval_s=round(planned.interval_s),
        checkpoint_every_steps=planned.every_steps(),
        **class_fields(
            placed.gpu_class,
            placed.gpus_per_node,
            efa_interfaces(settings, placed.gpu_class),
            compute_class_label,
        ),
    )
    if request.nodes == 1:
        return Written(single_node_job(spec), deployed)
    return Written(multi_node_job(spec, request.nodes, request.nodes), deployed)


def _repository(rendered: Rendered, image: str) -> dict[str, str]:
    """The image's repository must be one the stack's admission policy allows; the AWS account
    in a repository's host is the preview's stand-in until the stack is deployed."""
    allowed = _registries(rendered)
    if allowed is None:
        return {}
    repository = DIGEST_REFERENCE.fullmatch(image)["repository"]
    for registry in allowed:
        pattern = re.escape(registry).replace(ACCOUNT_ID, "[0-9]{12}")
        if re.fullmatch(pattern, repository):
            return {registry: repository} if registry != repository else {}
    shown = " or ".join(r.replace(ACCOUNT_ID, "<account>") for r in allowed)
    raise JobError(
        f"--image {image}: not from the stack's image repositories ({shown}); push it there "
        "and give its digest"
    )


def _registries(rendered: Rendered) -> list[str] | None:
    """The repositories the stack's image policy admits; None where it has no such policy."""
    for obj in rendered.objects:
        if obj["kind"] != "ValidatingAdmissionPolicy":
            continue
        for variable in obj["spec"].get("variables", []):
            if variable["name"] == "registries":
                return json.loads(variable["expression"])
    return None


def problems(rendered: Rendered, written: Written) -> list[str]:
    """What `spotctl render --validate` would find wrong with the Job in the stack: its schema,
    the stack's admission policies (as deployed) and whether its nodes serve its pods."""
    found, _ = validate([written.job], KUBERNETES_VERSION)
    text = json.dumps(rendered.objects)
    for preview, deployed in written.deployed.items():
        text = text.replace(preview, deployed)
    as_deployed = Rendered(objects=json.loads(text), releases=rendered.releases)
    found += admission_problems(as_deployed, [written.job])
    found += scheduling_problems(rendered, [written.job])
    return found
