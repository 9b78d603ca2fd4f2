"""What makes a Kubernetes workload spot-safe, shared by the CrossGuard pack (Pulumi inputs) and the
checkov checks (rendered manifests). Works on any Mapping/Sequence, both shapes are the same."""

from __future__ import annotations

from collections.abc import Mapping

from policies.inputs import as_list, dig

# Pods default to 30 s when terminationGracePeriodSeconds is unset.
DEFAULT_GRACE_SECONDS = 30
# The runtime's "preempted, resume me" exit status (EX_TEMPFAIL).
PREEMPTED_EXIT_CODE = 75


def tolerates_spot(pod_spec: Mapping) -> bool:
    """A toleration that lets the pod onto spot / preemptible nodes: a spot-named taint key or
    value (spot, gke-spot, gke-preemptible, karpenter capacity-type=spot, ...) or a bare Exists
    that tolerates every taint."""
    for toleration in as_list(dig(pod_spec, "tolerations")):
        key = str(dig(toleration, "key", default="")).lower()
        value = str(dig(toleration, "value", default="")).lower()
        if not key and dig(toleration, "operator") == "Exists":
            return True
        if any(word in text for word in ("spot", "preemptible") for text in (key, value)):
            return True
    return False


def ignores_disruption(job_spec: Mapping) -> bool:
    """podFailurePolicy has a rule that Ignores pods with the DisruptionTarget condition, so a
    preemption never counts against backoffLimit."""
    for rule in as_list(dig(job_spec, "podFailurePolicy", "rules")):
        if dig(rule, "action") != "Ignore":
            continue
        for condition in as_list(dig(rule, "onPodConditions")):
            if (
                dig(condition, "type") == "DisruptionTarget"
                and dig(condition, "status", default="True") == "True"
            ):
                return True
    return False


def ignores_preempted_exit(job_spec: Mapping) -> bool:
    """podFailurePolicy Ignores the runtime's "preempted, resume me" exit status."""
    for rule in as_list(dig(job_spec, "podFailurePolicy", "rules")):
        exit_codes = dig(rule, "onExitCodes", default={})
        if (
            dig(rule, "action") == "Ignore"
            and dig(exit_codes, "operator") == "In"
            and PREEMPTED_EXIT_CODE in as_list(dig(exit_codes, "values"))
        ):
            return True
    return False


def grace_seconds(pod_spec: Mapping) -> int:
    return dig(pod_spec, "terminationGracePeriodSeconds", default=DEFAULT_GRACE_SECONDS)


def job_specs(kind: str, spec: Mapping) -> list[Mapping]:
    """The Job specs inside a Job, CronJob or JobSet spec."""
    if kind == "Job":
        return [spec]
    if kind == "CronJob":
        return [dig(spec, "jobTemplate", "spec", default={})]
    if kind == "JobSet":
        return [
            dig(r, "template", "spec", default={}) for r in as_list(dig(spec, "replicatedJobs"))
        ]
    return []


def pod_spec(job_spec: Mapping) -> Mapping:
    return dig(job_spec, "template", "spec", default={})
