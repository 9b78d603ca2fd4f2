"""Admission policies: the API server itself refuses, or warns about, a workload in a team
namespace that the platform cannot protect, whoever submits it (`kubectl create -f job.yaml`).

ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, CEL, built into the API server
since Kubernetes 1.30; no controller to run), one per rule and named after it, so the API
server's answer names the rule, and the message says what is wrong and how to fix it:

    ValidatingAdmissionPolicy 'spot-job-ignores-disruption' with binding
    'spot-job-ignores-disruption-deny' denied request: <what is wrong>. Fix: <how>

Every policy matches the team namespaces (their `spot-training/team` label), on create, and on
an update that changes the object's spec (a metadata-only update, such as a controller removing
a finalizer of an object admitted before, is never refused). A training Job is one that Kueue
may put on spot: it names a queue (every team queue tries spot first) or tolerates the spot
taint, as policies/spot_workloads.py reads a toleration.

Per rule, a binding with [Deny, Audit] covers the namespaces whose mode is Deny, one with
[Warn, Audit] the namespaces in Warn mode and those with an unexpired waiver of the rule, and
one with [Audit] those in Audit mode (`kubernetes.admission` in the stack config): a warned
workload is admitted, and kubectl prints the message; an audited one only leaves an entry in
the API server's audit log. The API server has no clock in CEL, so a waiver ends at the first
`pulumi up` after its expiry; `spotctl review` lists the active ones.

No paramKind: a parameter object in the team's namespace could be edited by the team it
constrains, so the per-team values (each namespace's checkpoint root) are in the policy itself,
which only platform administrators can change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from string import Template

import pulumi
import pulumi_kubernetes as k8s

from components.config.kubernetes import AdmissionConfig, AdmissionMode
from components.k8s.jobs import PART_OF, PREEMPTED_EXIT_CODE, QUEUE_LABEL

API_VERSION = "admissionregistration.k8s.io/v1"
TEAM_LABEL = "spot-training/team"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
RUNBOOK = "runbooks/training/JobRefusedAtAdmission.md"
# A pod that sets no grace gets the API server's default.
DEFAULT_GRACE_SECONDS = 30
# What makes a toleration a spot one (policies/spot_workloads.tolerates_spot): a key or value
# that names spot or preemptible capacity, in any case.
SPOT_WORDS = "(?i)spot|preemptible"
ACTIONS: dict[AdmissionMode, list[str]] = {
    "Audit": ["Audit"],
    "Warn": ["Warn", "Audit"],
    "Deny": ["Deny", "Audit"],
}

_OPERATIONS = ["CREATE", "UPDATE"]
JOB_RESOURCES = [
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs", "cronjobs"]},
    {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "resources": ["jobsets"]},
]
SERVICE_RESOURCES = [
    {
        "apiGroups": ["apps"],
        "apiVersions": ["v1"],
        "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"],
    },
    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]},
]


@dataclass(frozen=True)
class Regime:
    """What the stack's training workloads must respect, as plain values."""

    # Team namespace -> where its runs checkpoint ("s3://<bucket>/<team prefix>").
    checkpoint_roots: dict[str, str]
    # Image repositories (no tag or digest) whose images may run, by digest.
    image_repositories: tuple[str, ...]
    notice_seconds: int
    notice_sources: tuple[str, ...]
    local_queue: str
    # Taint keys of the GPU nodes that only training may tolerate (besides spot's).
    guarded_taint_keys: tuple[str, ...]

    def message_values(self) -> dict[str, str]:
        return {
            "notice_sources": ",".join(self.notice_sources),
            "notice_seconds": str(self.notice_seconds),
            "image_repositories": " or ".join(self.image_repositories),
            "queue": self.local_queue,
            "guarded_taints": ", ".join(self.guarded_taint_keys),
        }


def _cel(value) -> str:
    """A CEL literal of a string, a number or a list or map of them (JSON's syntax is CEL's)."""
    return json.dumps(value)


def _tolerates_spot(pod: str) -> str:
    return (
        f"(has({pod}.tolerations) && {pod}.tolerations.exists(t, "
        "((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists') || "
        f"(has(t.key) && t.key.matches('{SPOT_WORDS}')) || "
        f"(has(t.value) && t.value.matches('{SPOT_WORDS}'))))"
    )


def _image_pinned(container: str) -> str:
    return (
        f"(has({container}.image) && {container}.image.matches('@sha256:[0-9a-f]{{64}}$') && "
        f"variables.registries.exists(r, {container}.image.startsWith(r + '@sha256:')))"
    )


def _privileged(container: str) -> str:
    return (
        f"(has({container}.securityContext) && has({container}.securityContext.privileged) && "
        f"{container}.securityContext.privileged)"
    )


def _all_containers(pod: str, condition) -> str:
    """CEL: `condition` holds for every container and init container of the pod spec."""
    return (
        f"({pod}.containers.all(c, {condition('c')}) && "
        f"(!has({pod}.initContainers) || {pod}.initContainers.all(c, {condition('c')})))"
    )


def _env_set(pod: str, name: str, condition: str) -> str:
    """CEL: a container of the pod spec sets env `name` to a value `v` for which `condition`."""
    return (
        f"{pod}.containers.exists(c, has(c.env) && c.env.exists(e, e.name == '{name}' && "
        f"has(e.value) && [e.value].all(v, {condition})))"
    )


def _variables(regime: Regime) -> list[tuple[str, str]]:
    """Every variable a rule may use, in order (a variable may use those before it)."""
    kind = "request.kind.kind"
    owners = "(has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : [])"
    return [
        (
            "podSpecs",
            f"{kind} == 'Pod' ? [object.spec] : "
            f"{kind} == 'CronJob' ? [object.spec.jobTemplate.spec.template.spec] : "
            f"{kind} == 'JobSet' ? object.spec.replicatedJobs.map(r, r.template.spec.template.spec)"
            " : [object.spec.template.spec]",
        ),
        (
            "jobSpecs",
            f"{kind} == 'CronJob' ? [object.spec.jobTemplate.spec] : "
            f"{kind} == 'JobSet' ? object.spec.replicatedJobs.map(r, r.template.spec) : "
            f"{kind} == 'Job' ? [object.spec] : []",
        ),
        (
            "jobLabels",
            f"{kind} == 'CronJob' ? (has(object.spec.jobTemplate.metadata) && "
            "has(object.spec.jobTemplate.metadata.labels) ? object.spec.jobTemplate.metadata.labels"
            " : {}) : (has(object.metadata.labels) ? object.metadata.labels : {})",
        ),
        ("queued", f"'{QUEUE_LABEL}' in variables.jobLabels"),
        (
            "spotJobs",
            "variables.jobSpecs.filter(j, variables.queued || "
            f"{_tolerates_spot('j.template.spec')})",
        ),
        ("spotPods", "variables.spotJobs.map(j, j.template.spec)"),
        (
            "controlledBy",
            f"{owners}.filter(o, has(o.controller) && o.controller).map(o, o.kind)",
        ),
        ("checkpointRoot", f"{_cel(regime.checkpoint_roots)}[request.namespace]"),
        ("noticeSources", _cel(list(regime.notice_sources))),
        ("noticeSeconds", _cel(regime.notice_seconds)),
        ("queue", _cel(regime.local_queue)),
        ("registries", _cel(list(regime.image_repositories))),
        ("guardedTaints", _cel(list(regime.guarded_taint_keys))),
    ]


@dataclass(frozen=True)
class Rule:
    """One admission rule: a policy of one validation. The message says what is wrong, then
    "Fix: ..."; `$name` in it stands for the stack's value of `Regime.message_values`."""

    name: str
    resources: list[dict]
    expression: str
    message: str
    message_expression: str | None = None
    # Where else the same rule is enforced: the CrossGuard policy (preview) and the checkov
    # check (scan) that say the same thing.
    preview: str | None = None
    scan: str | None = None


SPOT_JOB = "A training Job that may run on spot (it names a queue or tolerates spot)"
_CHECKPOINT = (
    f"{SPOT_JOB} does not checkpoint under its team's prefix: a recall would lose its work, and "
    "its identity may write nowhere else. Fix: set env CHECKPOINT_URI to "
)
RULES = (
    Rule(
        "spot-job-ignores-disruption",
        JOB_RESOURCES,
        "variables.spotJobs.all(j, has(j.podFailurePolicy) && "
        "j.podFailurePolicy.rules.exists(r, r.action == 'Ignore' && has(r.onPodConditions) && "
        "r.onPodConditions.exists(c, c.type == 'DisruptionTarget' && "
        "(!has(c.status) || c.status == 'True'))))",
        f"{SPOT_JOB} counts a node recall as a failure: after backoffLimit recalls the run is "
        "dead. Fix: add the podFailurePolicy rule {action: Ignore, onPodConditions: "
        "[{type: DisruptionTarget}]}, as the team's Job templates have it",
        preview="k8s-spot-job-ignores-disruption",
        scan="CKV_SPOT_1",
    ),
    Rule(
        "spot-job-ignores-preempted-exit",
        JOB_RESOURCES,
        "variables.spotJobs.all(j, has(j.podFailurePolicy) && "
        "j.podFailurePolicy.rules.exists(r, r.action == 'Ignore' && has(r.onExitCodes) && "
        f"r.onExitCodes.operator == 'In' && {PREEMPTED_EXIT_CODE} in r.onExitCodes.values))",
        f"{SPOT_JOB} counts the runtime's preempted exit ({PREEMPTED_EXIT_CODE}, after its final "
        "save) as a failure. Fix: add the podFailurePolicy rule {action: Ignore, onExitCodes: "
        f"{{operator: In, values: [{PREEMPTED_EXIT_CODE}]}}}}, as the team's Job templates have it",
        scan="CKV_SPOT_3",
    ),
    Rule(
        "spot-job-checkpoints-under-team-prefix",
        JOB_RESOURCES,
        "variables.spotPods.all(p, "
        + _env_set("p", "CHECKPOINT_URI", "v.startsWith(variables.checkpointRoot + '/')")
        + ")",
        _CHECKPOINT + "<the team's checkpoint root>/<run> on its trainer container",
        message_expression=f"{_cel(_CHECKPOINT)} + variables.checkpointRoot + "
        "'/<run> on its trainer container'",
    ),
    Rule(
        "spot-job-names-notice-sources",
        JOB_RESOURCES,
        "variables.spotPods.all(p, "
        + _env_set(
            "p", "SPOTSAFE_NOTICE_SOURCES", "variables.noticeSources.all(s, s in v.split(','))"
        )
        + ")",
        f"{SPOT_JOB} does not tell the runtime where this cloud's termination notice comes "
        "from, so its final save may start too late. Fix: set env "
        "SPOTSAFE_NOTICE_SOURCES=$notice_sources on the container that sets CHECKPOINT_URI",
    ),
    Rule(
        "spot-job-grace-covers-notice",
        JOB_RESOURCES,
        "variables.spotPods.all(p, (has(p.terminationGracePeriodSeconds) ? "
        f"p.terminationGracePeriodSeconds : {DEFAULT_GRACE_SECONDS}) >= variables.noticeSeconds)",
        f"{SPOT_JOB} is killed before the $notice_seconds s termination notice ends, cutting "
        "off its final checkpoint. Fix: set terminationGracePeriodSeconds: $notice_seconds in "
        "its pod template",
        preview="k8s-spot-job-grace-period",
    ),
    Rule(
        "images-from-stack-registry-by-digest",
        JOB_RESOURCES + SERVICE_RESOURCES,
        "variables.podSpecs.all(p, " + _all_containers("p", _image_pinned) + ")",
        "An image from outside the stack's registry, or by tag: an exact resume needs the exact "
        "code that wrote the checkpoint. Fix: push the image to $image_repositories and refer to "
        "it as <repository>@sha256:<digest>",
    ),
    Rule(
        "pods-unprivileged",
        JOB_RESOURCES + SERVICE_RESOURCES,
        "variables.podSpecs.all(p, "
        + " && ".join(f"!(has(p.{h}) && p.{h})" for h in ("hostNetwork", "hostPID", "hostIPC"))
        + " && "
        + _all_containers("p", lambda c: f"!{_privileged(c)}")
        + ")",
        "A privileged container, or a pod in the node's network, PID or IPC namespace: it could "
        "reach the node's credentials and other teams' pods. Fix: remove "
        "securityContext.privileged and hostNetwork, hostPID, hostIPC",
    ),
    Rule(
        "training-job-uses-team-queue",
        JOB_RESOURCES,
        # A CronJob's or JobSet's own Jobs carry what their owner was judged by.
        "variables.controlledBy.exists(k, k in ['CronJob', 'JobSet']) || "
        f"(variables.queued && variables.jobLabels['{QUEUE_LABEL}'] == variables.queue)",
        "A training Job outside its team's Kueue queue bypasses the team's GPU quota and the "
        f"spot-then-on-demand order. Fix: set the label {QUEUE_LABEL}: $queue (the team's "
        "LocalQueue) in its metadata",
    ),
    Rule(
        "services-avoid-spot-and-gpu-nodes",
        SERVICE_RESOURCES,
        # A Job's pods are training; the Job was judged by the rules above.
        "(request.kind.kind == 'Pod' && 'Job' in variables.controlledBy) || "
        f"variables.podSpecs.all(p, !{_tolerates_spot('p')} && !(has(p.tolerations) && "
        "p.tolerations.exists(t, has(t.key) && t.key in variables.guardedTaints)))",
        "A service or bare pod tolerates the spot or GPU nodes' taint: a recall takes it down "
        "without notice, and it keeps GPU nodes from scaling in. Fix: remove its tolerations "
        "of spot and of $guarded_taints; services run on the stable pool",
        scan="CKV_SPOT_2",
    ),
)
RULE_NAMES = tuple(rule.name for rule in RULES)


def policy(rule: Rule, regime: Regime) -> dict:
    """The rule's ValidatingAdmissionPolicy, with the variables its expressions use."""
    used = _used_variables(rule, regime)
    message = Template(rule.message).substitute(regime.message_values())
    validation = {"expression": rule.expression, "message": message, "reason": "Forbidden"}
    if rule.message_expression:
        validation["messageExpression"] = rule.message_expression
    spec = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [{**r, "operations": list(_OPERATIONS)} for r in rule.resources],
            "namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]},
        },
        "matchConditions": [
            {
                # An update that leaves the spec alone (labels, finalizers) changes nothing
                # these rules judge.
                "name": "created-or-spec-changed",
                "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec",
            }
        ],
        "variables": [{"name": n, "expression": e} for n, e in used],
        "validations": [validation],
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": policy_metadata(rule),
        "spec": spec,
    }


def policy_metadata(rule: Rule) -> dict:
    # The runbook an engineer whose workload was refused follows (spotctl review checks it).
    return {
        "name": rule.name,
        "labels": dict(PART_OF),
        "annotations": {"spot-training/runbook": RUNBOOK},
    }


def _used_variables(rule: Rule, regime: Regime) -> list[tuple[str, str]]:
    """The variables the rule's expressions reach, directly or through other variables."""
    variables = _variables(regime)
    needed: set[str] = set()
    texts = [rule.expression, rule.message_expression or ""]
    for name, expression in reversed(variables):
        if any(f"variables.{name}" in text for text in texts):
            needed.add(name)
            texts.append(expression)
    return [(name, expression) for name, expression in variables if name in needed]


def bindings(
    rule_names: list[str], modes: dict[str, AdmissionMode], waived: dict[str, set[str]]
) -> list[dict]:
    """Per rule, a binding per mode for the namespaces in it, a waiver of the rule turning its
    namespace's Deny to Warn; none where no namespace is left."""
    found = []
    for rule in rule_names:
        by_mode: dict[AdmissionMode, list[str]] = {mode: [] for mode in ACTIONS}
        for namespace, mode in sorted(modes.items()):
            waived_here = mode == "Deny" and rule in waived.get(namespace, set())
            by_mode["Warn" if waived_here else mode].append(namespace)
        for mode, namespaces in by_mode.items():
            if not namespaces:
                continue
            found.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": f"{rule}-{mode.lower()}", "labels": dict(PART_OF)},
                    "spec": {
                        "policyName": rule,
                        "validationActions": list(ACTIONS[mode]),
                        "matchResources": {
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {
                                        "key": NAMESPACE_NAME_LABEL,
                                        "operator": "In",
                                        "values": namespaces,
                                    }
                                ]
                            }
                        },
                    },
                }
            )
    return found


@dataclass(frozen=True)
class AdmissionArgs:
    # Team namespace -> its checkpoint root, known once the bucket exists.
    checkpoint_roots: dict[str, pulumi.Input[str]]
    image_repositories: tuple[pulumi.Input[str], ...]
    notice_seconds: int
    notice_sources: tuple[str, ...]
    local_queue: str
    guarded_taint_keys: tuple[str, ...]
    settings: AdmissionConfig
    # The day the waivers' expiry is measured against.
    today: date

    def __post_init__(self) -> None:
        waivers = self.settings.waivers
        unknown = sorted({w.rule for w in waivers} - set(RULE_NAMES))
        if unknown:
            raise ValueError(
                f"kubernetes.admission.waivers: no admission rule {', '.join(unknown)} "
                f"(rules: {', '.join(RULE_NAMES)})"
            )
        named = {"namespace_modes": set(self.settings.namespace_modes)}
        named["waivers"] = {w.namespace for w in waivers}
        for what, namespaces in named.items():
            strangers = sorted(namespaces - set(self.checkpoint_roots))
            if strangers:
                raise ValueError(
                    f"kubernetes.admission.{what}: {', '.join(strangers)} is no team namespace "
                    f"(team namespaces: {', '.join(sorted(self.checkpoint_roots))})"
                )

    def modes(self) -> dict[str, AdmissionMode]:
        return {ns: self.settings.mode_of(ns) for ns in self.checkpoint_roots}

    def waived(self) -> dict[str, set[str]]:
        """Team namespace -> the rules an unexpired waiver lets it off."""
        return {ns: set(self.settings.waived(ns, self.today)) for ns in self.checkpoint_roots}


class AdmissionPolicies(pulumi.ComponentResource):
    """The rules' ValidatingAdmissionPolicies and their bindings to the team namespaces."""

    def __init__(
        self, name: str, args: AdmissionArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:admission:AdmissionPolicies", name, None, opts)
        namespaces = list(args.checkpoint_roots)
        count = len(namespaces)
        regime = pulumi.Output.all(*args.checkpoint_roots.values(), *args.image_repositories).apply(
            lambda values: Regime(
                checkpoint_roots=dict(zip(namespaces, values[:count], strict=True)),
                image_repositories=tuple(dict.fromkeys(values[count:])),
                notice_seconds=args.notice_seconds,
                notice_sources=args.notice_sources,
                local_queue=args.local_queue,
                guarded_taint_keys=args.guarded_taint_keys,
            )
        )
        child = pulumi.ResourceOptions(parent=self)
        policies = []
        for rule in RULES:
            spec = regime.apply(lambda r, rule=rule: policy(rule, r)["spec"])
            policies.append(
                k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                    f"{name}-{rule.name}",
                    metadata=policy_metadata(rule),
                    spec=spec,
                    opts=child,
                )
            )
        for waiver in args.settings.waivers:
            if not waiver.active(args.today):
                pulumi.log.warn(
                    f"kubernetes.admission: the waiver of {waiver.rule} for {waiver.namespace} "
                    f"({waiver.owner}) expired on {waiver.expires}: the rule applies again"
                )
        after_policies = pulumi.ResourceOptions(parent=self, depends_on=policies)
        for binding in bindings(list(RULE_NAMES), args.modes(), args.waived()):
            k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                f"{name}-{binding['metadata']['name']}",
                metadata=binding["metadata"],
                spec=binding["spec"],
                opts=after_policies,
            )
        self.register_outputs({"policies": list(RULE_NAMES)})
