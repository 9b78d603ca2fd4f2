"""Node pools on GKE. Spot pools: tainted, so only checkpoint-capable jobs land there, and with a
kubelet shutdown grace GKE can honour, so the notice budget the runtime plans with is real. The
buffer pool: on-demand and without autoscaling, so its size is its schedule's."""

from __future__ import annotations

from policies.inputs import as_list, dig
from policies.rule import MANDATORY, ResourceRule

NODE_POOL = "gcp:container/nodePool:NodePool"
GUARDING_EFFECTS = ("NO_SCHEDULE", "NO_EXECUTE")
# What GKE gives when the pool sets nothing: 30 s in all, 15 s of it for critical pods.
DEFAULT_GRACE_SECONDS = 30
# The node label of the buffer tier (components/pools.py: POOL_LABEL, tier "buffer").
BUFFER_LABEL = ("node-pool", "buffer")


def _spot_config(args):
    """The node config of a Spot or preemptible GKE node pool, or None."""
    if args.resource_type != NODE_POOL:
        return None
    config = dig(args.props, "nodeConfig", default={})
    return config if dig(config, "spot") is True or dig(config, "preemptible") is True else None


def _check_spot_pool_tainted(args, report_violation, _settings) -> None:
    config = _spot_config(args)
    if config is None:
        return
    if not any(dig(t, "effect") in GUARDING_EFFECTS for t in as_list(dig(config, "taints"))):
        report_violation(
            f"GKE spot node pool '{args.name}' has no nodeConfig taint with effect "
            f"{' or '.join(GUARDING_EFFECTS)}"
        )


def _check_shutdown_grace(args, report_violation, settings) -> None:
    config = _spot_config(args)
    if config is None:
        return
    kubelet = dig(config, "kubeletConfig", default={})
    grace = dig(kubelet, "shutdownGracePeriodSeconds", default=DEFAULT_GRACE_SECONDS)
    critical = dig(kubelet, "shutdownGracePeriodCriticalPodsSeconds", default=0)
    if grace > settings["maxShutdownGraceSeconds"]:
        report_violation(
            f"GKE spot node pool '{args.name}' asks for {grace:g} s of shutdown grace; GKE "
            f"honours at most {settings['maxShutdownGraceSeconds']:g} s"
        )
    if critical >= grace:
        report_violation(
            f"GKE spot node pool '{args.name}' gives critical pods {critical:g} of its "
            f"{grace:g} s shutdown grace, leaving training pods none"
        )


def _check_buffer_fixed(args, report_violation, _settings) -> None:
    if args.resource_type != NODE_POOL:
        return
    config = dig(args.props, "nodeConfig", default={})
    key, value = BUFFER_LABEL
    if dig(config, "labels", key) != value:
        return
    if dig(config, "spot") is True or dig(config, "preemptible") is True:
        report_violation(
            f"GKE buffer pool '{args.name}' runs spot or preemptible nodes; the services it holds "
            "by day would lose them at any time"
        )
    if dig(args.props, "autoscaling"):
        report_violation(
            f"GKE buffer pool '{args.name}' has autoscaling; the autoscaler and its schedule's "
            "resizes would undo each other"
        )


POLICIES = [
    ResourceRule(
        "gke-spot-pool-tainted",
        "GKE node pools with spot or preemptible nodes carry a NoSchedule or NoExecute taint.",
        "GKE labels spot nodes but does not taint them; untainted, they attract pods that "
        "cannot survive a 30-second recall.",
        _check_spot_pool_tainted,
        MANDATORY,
        fix=(
            "Add a taint with effect NO_SCHEDULE (or NO_EXECUTE) to the spot node pool's "
            "nodeConfig.taints."
        ),
    ),
    ResourceRule(
        "gke-spot-pool-shutdown-grace",
        "GKE spot node pools ask for at most maxShutdownGraceSeconds of kubelet shutdown grace, "
        "and leave user pods part of it.",
        "A Spot VM is powered off when its notice ends, whatever the kubelet was told; a grace "
        "beyond what GKE honours gives the runtime a deadline that does not exist.",
        _check_shutdown_grace,
        MANDATORY,
        config={
            "maxShutdownGraceSeconds": {"type": "integer", "minimum": 1, "default": 120},
        },
        fix=(
            "Set gcp.spot_shutdown in the stack config to at most maxShutdownGraceSeconds, with "
            "critical_pods_seconds below seconds."
        ),
    ),
    ResourceRule(
        "gke-buffer-pool-on-demand-fixed",
        "The GKE buffer pool (nodes labelled node-pool=buffer) is on-demand and has no "
        "autoscaling.",
        "Its schedule sets its size (Cloud Scheduler calling setSize): services by day need "
        "nodes no recall takes, and an autoscaler would size it against the schedule.",
        _check_buffer_fixed,
        MANDATORY,
        fix=(
            "Keep the buffer pool on-demand (no spot or preemptible) and without autoscaling; its "
            "schedule sets its size (gcp.buffer_pool in the stack config)."
        ),
    ),
]
