"""Kubernetes objects managed by the stack: services are never preempted by training, a
spot-tolerating training job never counts a preemption as a failure, and Karpenter node pools are
tainted and diversified like EKS ones, one accelerator model each, with a GPU limit."""

from __future__ import annotations

import json
import re
from pathlib import Path

from policies.inputs import as_list, dig, of_type
from policies.rule import ADVISORY, MANDATORY, ResourceRule, StackRule
from policies.spot_workloads import (
    grace_seconds,
    ignores_disruption,
    job_specs,
    pod_spec,
    tolerates_spot,
)

# The GPU instance types of components/catalog.yaml, carried by the pack so that it runs wherever
# it is published (`python -m spotctl.policy_pack` regenerates the file).
GPU_TYPES_FILE = Path(__file__).with_name("gpu_types.json")
GPU_TYPES = json.loads(GPU_TYPES_FILE.read_text())["aws"]
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
KARPENTER_NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
GUARDING_EFFECTS = ("NoSchedule", "NoExecute")
JOB_KINDS = {
    "kubernetes:batch/v1:Job": "Job",
    "kubernetes:batch/v1:CronJob": "CronJob",
    "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet": "JobSet",
}


def _class_name(resource) -> str:
    return dig(resource.props, "metadata", "name", default=resource.name)


def _check_services_priority(args, report_violation, settings) -> None:
    classes = of_type(args.resources, PRIORITY_CLASS)
    is_services = re.compile(settings["servicesClassPattern"])
    services = [c for c in classes if is_services.search(_class_name(c))]
    others = [c for c in classes if c not in services]
    for service in services:
        name, value = _class_name(service), dig(service.props, "value", default=0)
        if dig(service.props, "preemptionPolicy") == "Never":
            report_violation(
                f"PriorityClass '{name}' has preemptionPolicy Never: services could not reclaim "
                "nodes from training",
                service.urn,
            )
        outranking = [_class_name(c) for c in others if dig(c.props, "value", default=0) >= value]
        if outranking:
            report_violation(
                f"services PriorityClass '{name}' (value {value:g}) does not outrank "
                f"{', '.join(outranking)}: training could preempt services",
                service.urn,
            )


def _spot_jobs(args):
    kind = JOB_KINDS.get(args.resource_type)
    if kind is None:
        return []
    return [
        job
        for job in job_specs(kind, dig(args.props, "spec", default={}))
        if tolerates_spot(pod_spec(job))
    ]


def _check_ignores_disruption(args, report_violation, _settings) -> None:
    for job in _spot_jobs(args):
        if not ignores_disruption(job):
            report_violation(
                f"'{args.name}' tolerates spot but its podFailurePolicy does not Ignore "
                "DisruptionTarget: every preemption would use up backoffLimit"
            )


def _check_grace_period(args, report_violation, settings) -> None:
    budget = settings["noticeBudgetSeconds"]
    for job in _spot_jobs(args):
        grace = grace_seconds(pod_spec(job))
        if grace < budget:
            report_violation(
                f"'{args.name}' tolerates spot with terminationGracePeriodSeconds {grace:g}, "
                f"below the {budget:g} s notice budget: the final checkpoint may be cut off"
            )


def _karpenter_spot_pool(args):
    """The node template of a Karpenter NodePool that may launch spot capacity, else None."""
    if args.resource_type != KARPENTER_NODE_POOL:
        return None
    template = dig(args.props, "spec", "template", "spec", default={})
    for requirement in as_list(dig(template, "requirements")):
        if (
            dig(requirement, "key") == "karpenter.sh/capacity-type"
            and dig(requirement, "operator") == "In"
            and "spot" in as_list(dig(requirement, "values"))
        ):
            return template
    return None


def _check_karpenter_tainted(args, report_violation, _settings) -> None:
    template = _karpenter_spot_pool(args)
    if template is None:
        return
    if not any(dig(t, "effect") in GUARDING_EFFECTS for t in as_list(dig(template, "taints"))):
        report_violation(
            f"Karpenter NodePool '{args.name}' launches spot nodes without a NoSchedule or "
            "NoExecute taint"
        )


def _check_karpenter_diversified(args, report_violation, settings) -> None:
    """An `In` requirement narrows the choice; no requirement leaves Karpenter every option."""
    template = _karpenter_spot_pool(args)
    if template is None:
        return
    limits = {
        "node.kubernetes.io/instance-type": ("instance type(s)", settings["minInstanceTypes"]),
        "topology.kubernetes.io/zone": ("zone(s)", settings["minZones"]),
    }
    for requirement in as_list(dig(template, "requirements")):
        key = dig(requirement, "key")
        if key in limits and dig(requirement, "operator") == "In":
            what, minimum = limits[key]
            count = len(set(as_list(dig(requirement, "values"))))
            if count < minimum:
                report_violation(
                    f"Karpenter NodePool '{args.name}' allows {count} {what}; "
                    f"diversify over at least {minimum:g}"
                )


def _requirement(template, key: str):
    return next((r for r in as_list(dig(template, "requirements")) if dig(r, "key") == key), None)


def _gpu_node_pool(args):
    """The node template of a Karpenter NodePool that launches GPU instances, else None: it
    selects a GPU model, or lists instance types the catalog knows as GPU types."""
    if args.resource_type != KARPENTER_NODE_POOL:
        return None
    template = dig(args.props, "spec", "template", "spec", default={})
    listed = as_list(dig(_requirement(template, "node.kubernetes.io/instance-type"), "values"))
    if _requirement(template, "karpenter.k8s.aws/instance-gpu-name") or any(
        t in GPU_TYPES for t in listed
    ):
        return template
    return None


def _check_one_accelerator(args, report_violation, _settings) -> None:
    template = _gpu_node_pool(args)
    if template is None:
        return
    names = _requirement(template, "karpenter.k8s.aws/instance-gpu-name")
    if dig(names, "operator") != "In" or len(set(as_list(dig(names, "values")))) != 1:
        report_violation(
            f"Karpenter NodePool '{args.name}' launches GPUs without pinning one model "
            "(karpenter.k8s.aws/instance-gpu-name In [<one model>])"
        )
    listed = as_list(dig(_requirement(template, "node.kubernetes.io/instance-type"), "values"))
    accelerators = {
        (GPU_TYPES[t]["gpu"], GPU_TYPES[t]["gpu_memory_gib"]) for t in listed if t in GPU_TYPES
    }
    if len(accelerators) > 1:
        report_violation(
            f"Karpenter NodePool '{args.name}' lists instance types of "
            f"{len(accelerators)} accelerators: "
            + ", ".join(sorted(f"{model} {gib} GB" for model, gib in accelerators))
        )


def _check_gpu_limit(args, report_violation, _settings) -> None:
    if _gpu_node_pool(args) is None:
        return
    if dig(args.props, "spec", "limits", "nvidia.com/gpu") is None:
        report_violation(
            f"Karpenter NodePool '{args.name}' has no limit on nvidia.com/gpu: nothing bounds "
            "what it launches against the quotas the stack checked"
        )


POLICIES = [
    StackRule(
        "k8s-services-priority-not-preemptible",
        "PriorityClasses for services (name matching servicesClassPattern) outrank every other "
        "PriorityClass and may preempt (preemptionPolicy is not Never).",
        "Services must never lose their nodes to training, and must be able to take the buffer "
        "pool back from it.",
        _check_services_priority,
        MANDATORY,
        config={"servicesClassPattern": {"type": "string", "default": "service"}},
        fix=(
            "Give the services PriorityClass the highest value of all PriorityClasses and "
            "preemptionPolicy PreemptLowerPriority (or leave it unset)."
        ),
    ),
    ResourceRule(
        "k8s-spot-job-ignores-disruption",
        "Jobs, CronJobs and JobSets that tolerate spot nodes have a podFailurePolicy rule that "
        "Ignores the DisruptionTarget pod condition.",
        "A preemption is not a failure: counted against backoffLimit it kills long runs that "
        "would resume from their checkpoint.",
        _check_ignores_disruption,
        MANDATORY,
        fix=(
            "Add a podFailurePolicy rule with action Ignore and onPodConditions [{type: "
            "DisruptionTarget}] to the Job, CronJob job template or JobSet's replicated jobs."
        ),
    ),
    ResourceRule(
        "k8s-spot-job-grace-period",
        "Spot-tolerating jobs set terminationGracePeriodSeconds to at least noticeBudgetSeconds.",
        "The runtime needs the whole termination notice to write and commit its final "
        "checkpoint (AWS gives 120 s).",
        _check_grace_period,
        ADVISORY,
        config={"noticeBudgetSeconds": {"type": "integer", "minimum": 1, "default": 120}},
        fix=(
            "Set terminationGracePeriodSeconds on the pod template to at least noticeBudgetSeconds "
            "(the cloud's notice: kubernetes.notice_seconds in the stack config)."
        ),
    ),
    ResourceRule(
        "karpenter-spot-pool-tainted",
        "Karpenter NodePools that allow capacity-type spot taint their nodes NoSchedule or "
        "NoExecute.",
        "The same guard as for EKS node groups, for clusters that provision with Karpenter.",
        _check_karpenter_tainted,
        MANDATORY,
        fix=(
            "Add a taint with effect NoSchedule (or NoExecute) to spec.template.spec.taints of the "
            "NodePool."
        ),
    ),
    ResourceRule(
        "karpenter-spot-pool-diversified",
        "Karpenter spot NodePools that restrict instance types or zones with `In` still allow "
        "at least minInstanceTypes types and minZones zones.",
        "Spot capacity runs dry per instance type and zone; a narrow NodePool stalls jobs.",
        _check_karpenter_diversified,
        ADVISORY,
        config={
            "minInstanceTypes": {"type": "integer", "minimum": 1, "default": 3},
            "minZones": {"type": "integer", "minimum": 1, "default": 2},
        },
        fix=(
            "Widen the NodePool's `In` requirements to at least minInstanceTypes instance types of "
            "the class and minZones zones (gpu_classes[].instance_types and zones); where the "
            "catalog has fewer types for the class, waive it in policies/waivers.yaml with a "
            "reason and an expiry."
        ),
    ),
    ResourceRule(
        "karpenter-gpu-pool-one-accelerator",
        "Karpenter NodePools that launch GPU instances pin one GPU model "
        "(karpenter.k8s.aws/instance-gpu-name In [one value]) and list instance types of one "
        "accelerator model and memory (components/catalog.yaml).",
        "A job sized for one GPU fails or crawls on another, a DDP gang is gated by its slowest "
        "node, and exact resume holds only on the same hardware.",
        _check_one_accelerator,
        MANDATORY,
        fix=(
            "Require karpenter.k8s.aws/instance-gpu-name In [one model] and list only instance "
            "types of one accelerator model and memory, as components/catalog.yaml groups them "
            "into GPU classes."
        ),
    ),
    ResourceRule(
        "karpenter-gpu-pool-limited",
        "Karpenter NodePools that launch GPU instances set spec.limits on nvidia.com/gpu.",
        "The stack checks team quotas against pool limits and pool limits against the EC2 "
        "service quotas; an unbounded pool escapes both and the bill.",
        _check_gpu_limit,
        ADVISORY,
        fix=(
            "Set spec.limits with nvidia.com/gpu on the NodePool (gpu_classes[].spot_gpus or "
            "on_demand_gpus in the stack config)."
        ),
    ),
]
