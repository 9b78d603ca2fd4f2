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

from components.config import StackConfig
from components.config.capacity import efa_interfaces
from components.config.stack import Team
from components.k8s.jobs import (
    SHM_GIB,
    TrainingJobSpec,
    class_fields,
    multi_node_job,
    single_node_job,
    spec_from_document,
)
from components.versions import KUBERNETES_VERSION
from spotctl.job.memory import Room
from spotctl.job.request import DIGEST_REFERENCE, JobError, Placed, Request
from spotctl.plan import Planned
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
    room: Room | None,
) -> Written:
    """The team's Job for the request, from the spec of its templates, saving at the planned
    interval; with the memory tier's `room`, at the two tiers' intervals, the pod's /dev/shm and
    memory grown to hold the tier's copies."""
    spec, compute_class_label = team_spec(resources, placed.team)
    deployed = {}
    root = spec.checkpoint_root
    if placed.bucket is not None:
        preview_bucket = root.split("/")[2]
        deployed[preview_bucket] = placed.bucket
        root = root.replace(preview_bucket, placed.bucket, 1)
    deployed.update(_repository(rendered, request.image))
    fields = class_fields(
        placed.gpu_class,
        placed.gpus_per_node,
        efa_interfaces(settings, placed.gpu_class),
        compute_class_label,
    )
    tiers = planned.memory_tier
    if room is None:
        intervals = {
            "checkpoint_interval_s": round(planned.interval_s),
            "checkpoint_every_steps": planned.interval_steps,
        }
    else:
        intervals = {
            "checkpoint_interval_s": round(tiers["durable_interval_s"]),
            "checkpoint_every_steps": tiers["durable_interval_steps"],
            "memory_every_steps": tiers["memory_interval_steps"],
            "memory": f"{room.pod_memory_gib}Gi",
            "shm_size": f"{SHM_GIB + room.shelf_gib}Gi",
        }
    spec = replace(
        spec,
        name=request.name,
        image=request.image,
        command=request.command,
        checkpoint_root=root,
        **{**fields, **intervals},
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
