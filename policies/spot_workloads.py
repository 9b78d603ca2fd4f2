"""What makes a Kubernetes workload spot-safe, shared by the CrossGuard pack (Pulumi inputs) and the
checkov checks (rendered manifests). Works on any Mapping/Sequence, both shapes are the same."""

from __future__ import annotations

import os
import re
import shlex
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


def launcher_problem(pod_spec: Mapping) -> str | None:
    """What is unsafe in how a container launches distributed training, or None.

    torchrun (and torch.distributed.launch) turns the ranks' exit 75 into 1 (a preemption then
    counts as a failure), so the launcher is spotsafe-run, however the container starts it
    (directly, through `env`, or in a shell's `-c` script); and a multi-node c10d rendezvous that
    an agent would host dies with that agent's node, so the agents must meet in a store elsewhere
    (`is_host=false`).
    """
    for container in as_list(dig(pod_spec, "containers")):
        argv = [
            str(a) for a in as_list(dig(container, "command")) + as_list(dig(container, "args"))
        ]
        for command in _commands(argv):
            program = os.path.basename(command[0])
            if program == "torchrun" or (
                program.startswith("python") and _option(command, "-m") in TORCH_LAUNCHERS
            ):
                return "launches torchrun, which exits 1 when its ranks stop for a preemption"
            if program == "spotsafe-run" and _multi_node(command) and not _store_elsewhere(command):
                return "its agents would host their own rendezvous (no --rdzv-conf is_host=false)"
    return None


# The modules `python -m` starts torchrun's agent from (launch is the deprecated spelling).
TORCH_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")
SHELLS = ("sh", "bash", "dash", "ash", "zsh")
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")"}


def _commands(argv: list[str]) -> list[list[str]]:
    """The simple commands a container's argv runs: itself, the commands of a shell's `-c`
    script, each without a leading `exec`, `env` (and its VAR=value) or VAR=value."""
    while argv and (argv[0] == "exec" or "=" in argv[0] or os.path.basename(argv[0]) == "env"):
        argv = argv[1:]
    if not argv:
        return []
    # -c, alone or among other short options (bash -lc, sh -ec), takes the script.
    flag = next((i for i, a in enumerate(argv[1:-1], 1) if re.fullmatch(r"-[a-z]*c[a-z]*", a)), 0)
    if os.path.basename(argv[0]) in SHELLS and flag:
        lines = argv[flag + 1].replace("\\\n", " ")  # continued lines are one command
        lexer = shlex.shlex(lines.replace("\n", " ; "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:  # unbalanced quotes: the shell would refuse it too
            return []
        commands: list[list[str]] = [[]]
        for token in tokens:
            if token in _SEPARATORS:
                commands.append([])
            else:
                commands[-1].append(token)
        return [c for command in commands if command for c in _commands(command)]
    return [argv]


def _option(argv: list[str], name: str) -> str | None:
    """The value of a torchrun option, --name=value or --name value, - or _ in the name."""
    names = {name, name.replace("-", "_")}
    for i, arg in enumerate(argv):
        flag, _, value = arg.partition("=")
        if flag in names:
            return value if value or i + 1 == len(argv) else argv[i + 1]
    return None


def _multi_node(argv: list[str]) -> bool:
    """--nnodes allows more than one node; a value only the pod knows ($(N)) may too."""
    most = (_option(argv, "--nnodes") or "1").rsplit(":", 1)[-1]
    return "--standalone" not in argv and (not most.isdigit() or int(most) > 1)


def _store_elsewhere(argv: list[str]) -> bool:
    conf = _option(argv, "--rdzv-conf") or ""
    return re.search(r"(^|,)is_host=(false|0|no|off)(,|$)", conf, re.IGNORECASE) is not None


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
