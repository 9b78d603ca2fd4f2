"""What the engineer asks `spotctl job` for, checked against the stack's config before any
preview: the team, its GPU class and quota, the GPUs a node carries, the image by digest, the
Job's name and the checkpoint bucket; and that a notice leaves the planned final save its time.
Each refusal is a JobError that names the flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from components.catalog import catalog
from components.config import StackConfig
from components.config.capacity import allocatable, template_class
from components.config.stack import GpuClass, Team

if TYPE_CHECKING:
    from spotctl.plan import Planned

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
            f"--nodes {request.nodes}: {request.nodes * gpus} GPUs ({request.nodes} nodes x "
            f"{gpus}) exceed team "
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
