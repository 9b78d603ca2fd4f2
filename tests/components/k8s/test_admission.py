"""The admission policies the Kubernetes layer installs, evaluated offline with the API server's
semantics (spotctl/render/admission.py; its own tests name the source): every stack's shipped
Job templates and team workloads are admitted without a warning, each broken variant is refused
by the rule that names its fault, and the policies are valid admissionregistration.k8s.io/v1
objects of the pinned Kubernetes version."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from datetime import date

import kubernetes_validate
import pytest
import yaml
from stack_files import REPO_ROOT, STACKS

from components.config.kubernetes import AdmissionConfig
from components.k8s.admission import RULE_NAMES, RULES, AdmissionArgs, bindings
from components.k8s.jobs import QUEUE_LABEL
from components.versions import KUBERNETES_VERSION
from policies import ALL_POLICIES
from spotctl.render.admission import admit
from spotctl.render.manifests import Rendered, admission_problems, render


@pytest.fixture(scope="module", params=STACKS)
def stack(request, stack_previews) -> tuple[str, Rendered]:
    return request.param, render(stack_previews(request.param))


@pytest.fixture(scope="module")
def prod(stack_previews) -> Rendered:
    return render(stack_previews("prod"))


def of_kind(rendered: Rendered, kind: str) -> list[dict]:
    return [o for o in rendered.all_objects() if o["kind"] == kind]


def test_every_rule_is_installed_valid_and_bound_warn_first(stack) -> None:
    name, rendered = stack
    policies = of_kind(rendered, "ValidatingAdmissionPolicy")
    assert sorted(p["metadata"]["name"] for p in policies) == sorted(RULE_NAMES)
    team_namespaces = sorted(
        ns["metadata"]["name"]
        for ns in of_kind(rendered, "Namespace")
        if "spot-training/team" in ns["metadata"].get("labels", {})
    )
    for obj in policies + of_kind(rendered, "ValidatingAdmissionPolicyBinding"):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    # The stacks set no admission mode: every namespace warns, none is refused yet.
    bound = {
        (b["spec"]["policyName"], tuple(b["spec"]["validationActions"])): b["spec"][
            "matchResources"
        ]["namespaceSelector"]["matchExpressions"][0]["values"]
        for b in of_kind(rendered, "ValidatingAdmissionPolicyBinding")
    }
    assert bound == {(rule, ("Warn", "Audit")): team_namespaces for rule in RULE_NAMES}, name


def test_shipped_templates_and_team_workloads_are_admitted(stack) -> None:
    name, rendered = stack
    assert len(rendered.templates) == 2 * len(
        [
            ns
            for ns in of_kind(rendered, "Namespace")
            if "spot-training/team" in ns["metadata"]["labels"]
        ]
    )
    assert admission_problems(rendered) == [], name
    # Under Deny too: every workload in a team namespace is admitted.
    policies, namespaces = _policies(rendered), _namespaces(rendered)
    deny = _deny(namespaces)
    for obj in rendered.all_objects():
        namespace = namespaces.get(obj["metadata"].get("namespace"))
        if namespace is not None:
            assert admit(policies, deny, obj, namespace).failures == [], obj["metadata"]["name"]


def test_render_validate_reports_what_the_policies_would_warn_about(prod) -> None:
    rendered = copy.deepcopy(prod)
    namespace, file_name = sorted(rendered.templates)[0]
    [job] = rendered.templates[(namespace, file_name)]
    del job["spec"]["podFailurePolicy"]
    where = f"Job {namespace}/{job['metadata']['name']}: "
    assert [p.split("' with binding")[0] for p in admission_problems(rendered)] == [
        f"{where}Validation failed for ValidatingAdmissionPolicy '{rule}"
        for rule in ("spot-job-ignores-disruption", "spot-job-ignores-preempted-exit")
    ]


def _policies(rendered: Rendered) -> list[dict]:
    return of_kind(rendered, "ValidatingAdmissionPolicy")


def _namespaces(rendered: Rendered) -> dict[str, dict]:
    return {
        ns["metadata"]["name"]: ns
        for ns in of_kind(rendered, "Namespace")
        if "spot-training/team" in ns["metadata"].get("labels", {})
    }


def _deny(namespaces: dict) -> list[dict]:
    return bindings(list(RULE_NAMES), dict.fromkeys(namespaces, "Deny"), {})


# ---- broken variants of the prod templates: (id, mutation of the single-node Job, rules) ----


def _pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def _trainer(job: dict) -> dict:
    return _pod(job)["containers"][0]


def _without_env(name: str) -> Callable[[dict], None]:
    def mutate(job: dict) -> None:
        _trainer(job)["env"] = [e for e in _trainer(job)["env"] if e["name"] != name]

    return mutate


def _set_env(name: str, value: str) -> Callable[[dict], None]:
    def mutate(job: dict) -> None:
        for env in _trainer(job)["env"]:
            if env["name"] == name:
                env["value"] = value

    return mutate


def _drop_failure_rule(key: str) -> Callable[[dict], None]:
    def mutate(job: dict) -> None:
        rules = job["spec"]["podFailurePolicy"]["rules"]
        job["spec"]["podFailurePolicy"]["rules"] = [r for r in rules if key not in r]

    return mutate


def _pod_field(key: str, value) -> Callable[[dict], None]:
    return lambda job: _pod(job).__setitem__(key, value)


def _image(value: str) -> Callable[[dict], None]:
    return lambda job: _trainer(job).__setitem__("image", value)


def _init_container(job: dict) -> None:
    _pod(job)["initContainers"] = [{"name": "fetch", "image": "busybox:1.36"}]


def _privileged(job: dict) -> None:
    _trainer(job)["securityContext"]["privileged"] = True


def _queue(value: str | None) -> Callable[[dict], None]:
    def mutate(job: dict) -> None:
        labels = job["metadata"]["labels"]
        if value is None:
            del labels[QUEUE_LABEL]
        else:
            labels[QUEUE_LABEL] = value

    return mutate


def _no_grace(job: dict) -> None:
    del _pod(job)["terminationGracePeriodSeconds"]


def _no_failure_policy(job: dict) -> None:
    del job["spec"]["podFailurePolicy"]


DISRUPTION, EXIT = "spot-job-ignores-disruption", "spot-job-ignores-preempted-exit"
CHECKPOINT, SOURCES = "spot-job-checkpoints-under-team-prefix", "spot-job-names-notice-sources"
GRACE, IMAGES = "spot-job-grace-covers-notice", "images-from-stack-registry-by-digest"
PRIVILEGED, QUEUE = "pods-unprivileged", "training-job-uses-team-queue"
SERVICES = "services-avoid-spot-and-gpu-nodes"

JOB_VARIANTS = [
    ("no-podFailurePolicy", _no_failure_policy, {DISRUPTION, EXIT}),
    ("counts-disruption", _drop_failure_rule("onPodConditions"), {DISRUPTION}),
    ("counts-exit-75", _drop_failure_rule("onExitCodes"), {EXIT}),
    ("no-checkpoint-uri", _without_env("CHECKPOINT_URI"), {CHECKPOINT}),
    ("checkpoint-outside-prefix", _set_env("CHECKPOINT_URI", "s3://elsewhere/run"), {CHECKPOINT}),
    ("no-notice-sources", _without_env("SPOTSAFE_NOTICE_SOURCES"), {SOURCES}),
    ("notice-sources-empty", _set_env("SPOTSAFE_NOTICE_SOURCES", ""), {SOURCES}),
    ("grace-30s", _pod_field("terminationGracePeriodSeconds", 30), {GRACE}),
    ("grace-default", _no_grace, {GRACE}),
    ("image-by-tag-elsewhere", _image("python:3.12"), {IMAGES}),
    (
        "image-other-registry-by-digest",
        _image("docker.io/library/python@sha256:" + "a" * 64),
        {IMAGES},
    ),
    ("init-container-by-tag", _init_container, {IMAGES}),
    ("host-network", _pod_field("hostNetwork", True), {PRIVILEGED}),
    ("host-pid", _pod_field("hostPID", True), {PRIVILEGED}),
    ("privileged", _privileged, {PRIVILEGED}),
    ("no-queue", _queue(None), {QUEUE}),
    ("other-queue", _queue("someone-elses"), {QUEUE}),
]


@pytest.fixture(scope="module")
def prod_single(prod: Rendered) -> tuple[dict, dict, list[dict], list[dict]]:
    """(the single-node template, its namespace, the policies, Deny bindings)."""
    namespaces = _namespaces(prod)
    (namespace, _), *_ = sorted(prod.templates)
    [job] = prod.templates[(namespace, "single-node.yaml")]
    return job, namespaces[namespace], _policies(prod), _deny(namespaces)


@pytest.mark.parametrize(
    ("mutate", "expected"), [v[1:] for v in JOB_VARIANTS], ids=[v[0] for v in JOB_VARIANTS]
)
def test_each_broken_job_is_refused_by_the_rule_that_names_it(prod_single, mutate, expected):
    template, namespace, policies, deny = prod_single
    job = copy.deepcopy(template)
    mutate(job)
    verdict = admit(policies, deny, job, namespace)
    assert not verdict.allowed
    assert {f.policy for f in verdict.denials} == expected
    for failure in verdict.denials:
        assert failure.text().startswith(f"ValidatingAdmissionPolicy '{failure.policy}' ")
        assert "Fix: " in failure.message


def test_the_checkpoint_message_names_the_teams_own_root(prod_single) -> None:
    template, namespace, policies, deny = prod_single
    job = copy.deepcopy(template)
    _without_env("CHECKPOINT_URI")(job)
    [failure] = admit(policies, deny, job, namespace).denials
    root = next(
        e["value"] for e in _trainer(template)["env"] if e["name"] == "CHECKPOINT_URI"
    ).rsplit("/", 1)[0]
    assert failure.message.endswith(f"CHECKPOINT_URI to {root}/<run> on its trainer container")


def _wrapped(job: dict, kind: str) -> dict:
    """The template's Job inside a JobSet or a CronJob, queue label where Kueue reads it."""
    meta = job["metadata"]
    if kind == "JobSet":
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": meta,
            "spec": {
                "replicatedJobs": [
                    {"name": "workers", "replicas": 1, "template": {"spec": job["spec"]}}
                ]
            },
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {k: v for k, v in meta.items() if k != "labels"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"metadata": {"labels": meta["labels"]}, "spec": job["spec"]},
        },
    }


def _service(pod: dict, kind: str = "Deployment") -> dict:
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api"}, "spec": pod}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "api"},
        "spec": {"selector": {"matchLabels": {"app": "api"}}, "template": {"spec": pod}},
    }


def test_jobsets_and_cronjobs_are_judged_like_jobs(prod_single) -> None:
    template, namespace, policies, deny = prod_single
    for kind in ("JobSet", "CronJob"):
        assert admit(policies, deny, _wrapped(template, kind), namespace).failures == [], kind
        broken = copy.deepcopy(template)
        _no_failure_policy(broken)
        _queue(None)(broken)
        broken["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
        refused = {
            f.policy for f in admit(policies, deny, _wrapped(broken, kind), namespace).denials
        }
        assert refused == {DISRUPTION, EXIT, QUEUE}, kind


def test_services_and_bare_pods_stay_off_spot_and_gpu_nodes(prod_single) -> None:
    template, namespace, policies, deny = prod_single
    pod = copy.deepcopy(_pod(template))
    spot, gpu = pod["tolerations"]
    pod["tolerations"] = []
    for kind in ("Deployment", "StatefulSet", "DaemonSet", "Pod"):
        assert admit(policies, deny, _service(pod, kind), namespace).failures == [], kind
        for tolerations in ([spot], [gpu], [{"operator": "Exists"}]):
            tolerating = _service({**pod, "tolerations": tolerations}, kind)
            refused = {f.policy for f in admit(policies, deny, tolerating, namespace).denials}
            assert refused == {SERVICES}, (kind, tolerations)
    # A Job's pods are training, judged by the Job's rules.
    job_pod = _service({**pod, "tolerations": [spot, gpu]}, "Pod")
    job_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "run", "uid": "1", "controller": True}
    ]
    assert admit(policies, deny, job_pod, namespace).failures == []


def test_only_team_namespaces_and_spec_changes_are_judged(prod_single) -> None:
    template, namespace, policies, deny = prod_single
    broken = copy.deepcopy(template)
    _no_failure_policy(broken)
    elsewhere = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox"}}
    assert admit(policies, deny, broken, elsewhere).failures == []
    # A finalizer removed from a Job admitted before its namespace was switched to Deny.
    relabelled = copy.deepcopy(broken)
    relabelled["metadata"]["finalizers"] = []
    assert admit(policies, deny, relabelled, namespace, operation="UPDATE", old=broken).allowed
    unsuspended = copy.deepcopy(broken)
    unsuspended["spec"]["suspend"] = False
    assert not admit(policies, deny, unsuspended, namespace, operation="UPDATE", old=broken).allowed


# ---- the issue's list: what the cluster accepted before, and after -------------------------

ISSUE_CASES = [
    "no-podFailurePolicy",
    "no-checkpoint-uri",
    "no-notice-sources",
    "grace-30s",
    "image-other-registry-by-digest",
    "image-by-tag-elsewhere",
    "host-network",
    "privileged",
    "no-queue",
]


def issue_cases(prod_single) -> list[dict]:
    template, *_ = prod_single
    variants = {v[0]: v[1] for v in JOB_VARIANTS}
    cases = []
    for case in ISSUE_CASES:
        job = copy.deepcopy(template)
        variants[case](job)
        cases.append(job)
    # A service onto spot GPU nodes: the toleration is one line.
    pod = copy.deepcopy(_pod(template))
    cases.append(_service(pod))
    return cases


def test_the_issues_cases_are_accepted_before_warned_in_warn_and_refused_in_deny(
    prod, prod_single
) -> None:
    _, namespace, policies, deny = prod_single
    cases = issue_cases(prod_single)
    warn = of_kind(prod, "ValidatingAdmissionPolicyBinding")
    before = [admit([], [], case, namespace) for case in cases]
    warned = [admit(policies, warn, case, namespace) for case in cases]
    denied = [admit(policies, deny, case, namespace) for case in cases]
    assert sum(v.allowed for v in before) == len(cases) == 10
    assert sum(v.allowed and bool(v.warnings) for v in warned) == len(cases)
    assert sum(v.allowed for v in denied) == 0


# ---- modes and waivers ----------------------------------------------------------------------


def args(**settings) -> AdmissionArgs:
    return AdmissionArgs(
        checkpoint_roots={"team-a": "s3://b/a", "team-b": "s3://b/b"},
        image_repositories=("registry/train",),
        notice_seconds=120,
        notice_sources=("sigterm",),
        local_queue="training",
        guarded_taint_keys=("nvidia.com/gpu",),
        settings=AdmissionConfig(**settings),
        today=date(2026, 12, 1),
    )


def bound(a: AdmissionArgs) -> dict[tuple[str, str], list[str]]:
    return {
        (b["spec"]["policyName"], b["spec"]["validationActions"][0]): b["spec"]["matchResources"][
            "namespaceSelector"
        ]["matchExpressions"][0]["values"]
        for b in bindings(list(RULE_NAMES), a.modes(), a.waived())
    }


def waiver(expires: str, rule: str = IMAGES, namespace: str = "team-a") -> dict:
    return {
        "rule": rule,
        "namespace": namespace,
        "reason": "base image migration",
        "owner": "ml@example.com",
        "expires": expires,
    }


def test_a_namespace_switches_to_deny_and_a_waiver_warns_until_it_expires() -> None:
    assert set(bound(args())) == {(rule, "Warn") for rule in RULE_NAMES}
    enforced = bound(args(mode="Deny", namespace_modes={"team-b": "Warn"}))
    assert all(enforced[(rule, "Deny")] == ["team-a"] for rule in RULE_NAMES)
    assert all(enforced[(rule, "Warn")] == ["team-b"] for rule in RULE_NAMES)
    audited = bound(args(mode="Audit"))
    assert audited == {(rule, "Audit"): ["team-a", "team-b"] for rule in RULE_NAMES}
    waived = bound(args(mode="Deny", waivers=[waiver("2026-12-01")]))
    assert waived[(IMAGES, "Warn")] == ["team-a"]
    assert waived[(IMAGES, "Deny")] == ["team-b"]
    assert waived[(QUEUE, "Deny")] == ["team-a", "team-b"]
    expired = bound(args(mode="Deny", waivers=[waiver("2026-11-30")]))
    assert set(expired) == {(rule, "Deny") for rule in RULE_NAMES}


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        (
            {"waivers": [waiver("2027-01-01", rule="images-by-tag")]},
            "no admission rule images-by-tag",
        ),
        (
            {"waivers": [waiver("2027-01-01", namespace="team-c")]},
            "waivers: team-c is no team namespace",
        ),
        ({"namespace_modes": {"default": "Deny"}}, "namespace_modes: default is no team namespace"),
    ],
)
def test_settings_naming_what_is_not_there_are_refused(settings, complaint) -> None:
    with pytest.raises(ValueError, match=complaint):
        args(**settings)


def test_the_docs_list_each_rule_once_with_where_it_is_enforced() -> None:
    text = (REPO_ROOT / "docs" / "kubernetes.md").read_text()
    header = "| Rule | Refuses | Preview | Scan | Admission |"
    rows = text.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    cells = [[c.strip().strip("`") for c in row.strip("|").split("|")] for row in rows]
    names = [row[0] for row in cells]
    assert len(names) == len(set(names))
    table = {row[0]: row for row in cells}
    for rule in RULES:
        _, _, preview, scan, admission = table[rule.name]
        assert (preview, scan.split("`")[0], admission) == (
            rule.preview or "—",
            rule.scan or "—",
            "yes",
        ), rule.name
    # Every checkov check appears once; every named CrossGuard policy is the pack's.
    checks = sorted(
        re.search(r'id="(CKV_SPOT_\d+)"', path.read_text())[1]
        for path in (REPO_ROOT / "policies" / "checkov").glob("ckv_spot_*.py")
    )
    assert sorted(row[3].split("`")[0] for row in cells if row[3] != "—") == checks
    pack = {policy.name for policy in ALL_POLICIES}
    assert {row[2] for row in cells if row[2] != "—"} <= pack
    assert [row[0] for row in cells if row[4] == "yes"] == list(RULE_NAMES)
    # The settings it shows are the schema's, and its waiver names a rule.
    example = text.split("**Warn first, then Deny.**", 1)[1].split("```yaml\n", 1)[1]
    settings = yaml.safe_load(example.split("```", 1)[0])["spot-training:kubernetes"]
    admission = AdmissionConfig.model_validate(settings["admission"])
    assert {w.rule for w in admission.waivers} <= set(RULE_NAMES)
