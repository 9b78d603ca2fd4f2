"""The GCP equivalents: GCS checkpoint buckets and tainted GKE spot node pools. Decided on type
tokens and inputs, so the pack needs no pulumi-gcp installed."""

from __future__ import annotations

from policies.inputs import as_list, dig
from policies.rule import ADVISORY, MANDATORY, ResourceRule

BUCKET = "gcp:storage/bucket:Bucket"
NODE_POOL = "gcp:container/nodePool:NodePool"
GUARDING_EFFECTS = ("NO_SCHEDULE", "NO_EXECUTE")


def _check_uniform_access(args, report_violation, _settings) -> None:
    if args.resource_type == BUCKET and args.props.get("uniformBucketLevelAccess") is not True:
        report_violation(f"GCS bucket '{args.name}' does not set uniformBucketLevelAccess: true")


def _check_versioning(args, report_violation, _settings) -> None:
    if args.resource_type == BUCKET and dig(args.props, "versioning", "enabled") is not True:
        report_violation(f"GCS bucket '{args.name}' does not set versioning.enabled: true")


def _check_lifecycle(args, report_violation, settings) -> None:
    if args.resource_type != BUCKET:
        return
    rules = as_list(args.props.get("lifecycleRules"))
    expires_noncurrent = any(
        dig(r, "action", "type") == "Delete"
        and (
            0
            < dig(r, "condition", "daysSinceNoncurrentTime", default=0)
            <= settings["maxNoncurrentDays"]
            or dig(r, "condition", "numNewerVersions", default=0) > 0
        )
        for r in rules
    )
    aborts_multipart = any(
        dig(r, "action", "type") == "AbortIncompleteMultipartUpload" for r in rules
    )
    if not expires_noncurrent:
        report_violation(
            f"GCS bucket '{args.name}' needs a Delete lifecycle rule on noncurrent versions "
            f"(daysSinceNoncurrentTime <= {settings['maxNoncurrentDays']:g} or numNewerVersions)"
        )
    if not aborts_multipart:
        report_violation(
            f"GCS bucket '{args.name}' needs an AbortIncompleteMultipartUpload lifecycle rule"
        )


def _check_spot_pool_tainted(args, report_violation, _settings) -> None:
    if args.resource_type != NODE_POOL:
        return
    config = dig(args.props, "nodeConfig", default={})
    if not (dig(config, "spot") is True or dig(config, "preemptible") is True):
        return
    if not any(dig(t, "effect") in GUARDING_EFFECTS for t in as_list(dig(config, "taints"))):
        report_violation(
            f"GKE spot node pool '{args.name}' has no nodeConfig taint with effect "
            f"{' or '.join(GUARDING_EFFECTS)}"
        )


POLICIES = [
    ResourceRule(
        "gcs-bucket-uniform-access",
        "GCS buckets enable uniform bucket-level access.",
        "Per-object ACLs bypass IAM; checkpoints must be governed by IAM alone.",
        _check_uniform_access,
        MANDATORY,
    ),
    ResourceRule(
        "gcs-bucket-versioning-enabled",
        "GCS buckets have object versioning enabled.",
        "Versioning is the second line of defence for checkpoints on GCP too.",
        _check_versioning,
        MANDATORY,
    ),
    ResourceRule(
        "gcs-bucket-lifecycle",
        "GCS buckets delete noncurrent versions and abort incomplete multipart uploads.",
        "Versioned checkpoint buckets otherwise grow without bound.",
        _check_lifecycle,
        ADVISORY,
        config={"maxNoncurrentDays": {"type": "integer", "minimum": 1, "default": 90}},
    ),
    ResourceRule(
        "gke-spot-pool-tainted",
        "GKE node pools with spot or preemptible nodes carry a NoSchedule or NoExecute taint.",
        "GKE labels spot nodes but does not taint them; untainted, they attract pods that "
        "cannot survive a 30-second recall.",
        _check_spot_pool_tainted,
        MANDATORY,
    ),
]
