"""Checkpoint storage on GCP: versioned, lifecycled, soft-deleting, private, under uniform
bucket-level access, encrypted with a rotating customer key (CMEK).

A GCS bucket carries all of these inline, so most are resource checks; CMEK is a stack check
because the key is another resource of the stack.
"""

from __future__ import annotations

import re

from policies.inputs import as_list, dig, of_type, refers_to
from policies.rule import ADVISORY, MANDATORY, ResourceRule, StackRule

BUCKET = "gcp:storage/bucket:Bucket"
CRYPTO_KEY = "gcp:kms/cryptoKey:CryptoKey"
DAY_SECONDS = 86400


def _check_uniform_access(args, report_violation, _settings) -> None:
    if args.resource_type == BUCKET and args.props.get("uniformBucketLevelAccess") is not True:
        report_violation(f"GCS bucket '{args.name}' does not set uniformBucketLevelAccess: true")


def _check_versioning(args, report_violation, _settings) -> None:
    if args.resource_type == BUCKET and dig(args.props, "versioning", "enabled") is not True:
        report_violation(f"GCS bucket '{args.name}' does not set versioning.enabled: true")


def _check_public_access(args, report_violation, _settings) -> None:
    if args.resource_type == BUCKET and args.props.get("publicAccessPrevention") != "enforced":
        report_violation(f"GCS bucket '{args.name}' does not set publicAccessPrevention: enforced")


def _check_soft_delete(args, report_violation, settings) -> None:
    if args.resource_type != BUCKET:
        return
    seconds = dig(args.props, "softDeletePolicy", "retentionDurationSeconds", default=0)
    if seconds < settings["minSoftDeleteDays"] * DAY_SECONDS:
        report_violation(
            f"GCS bucket '{args.name}' keeps deleted objects {seconds / DAY_SECONDS:g} days; "
            f"set softDeletePolicy.retentionDurationSeconds to at least "
            f"{settings['minSoftDeleteDays']:g} days"
        )


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


def rotation_days(key) -> float | None:
    """A CryptoKey's rotationPeriod ("7776000s") in days; None when it does not rotate."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(key.props.get("rotationPeriod") or ""))
    return float(match.group(1)) / DAY_SECONDS if match else None


def _rotates(key, settings) -> bool:
    days = rotation_days(key)
    return days is not None and days <= settings["maxRotationDays"]


def _check_cmek(args, report_violation, settings) -> None:
    rotating = [k for k in of_type(args.resources, CRYPTO_KEY) if _rotates(k, settings)]
    for bucket in of_type(args.resources, BUCKET):
        named = dig(bucket.props, "encryption", "defaultKmsKeyName") is not None
        if not (named and any(refers_to(bucket, "encryption", key) for key in rotating)):
            report_violation(
                f"GCS bucket '{bucket.name}' is not encrypted (encryption.defaultKmsKeyName) "
                f"with a KMS key of this stack that rotates within "
                f"{settings['maxRotationDays']:g} days",
                bucket.urn,
            )


def _check_key_rotation(args, report_violation, settings) -> None:
    if args.resource_type != CRYPTO_KEY:
        return
    days = rotation_days(args)
    if days is None or days > settings["maxRotationDays"]:
        rotation = "does not rotate" if days is None else f"rotates every {days:g} days"
        report_violation(
            f"KMS crypto key '{args.name}' {rotation}; set rotationPeriod to at most "
            f"{settings['maxRotationDays']:g} days"
        )


ROTATION = {"maxRotationDays": {"type": "integer", "minimum": 1, "default": 365}}

POLICIES = [
    ResourceRule(
        "gcs-bucket-uniform-access",
        "GCS buckets enable uniform bucket-level access.",
        "Per-object ACLs bypass IAM; checkpoints must be governed by IAM alone.",
        _check_uniform_access,
        MANDATORY,
        fix="Set uniformBucketLevelAccess: true on the bucket.",
    ),
    ResourceRule(
        "gcs-bucket-versioning-enabled",
        "GCS buckets have object versioning enabled.",
        "Versioning is the second line of defence for checkpoints on GCP too.",
        _check_versioning,
        MANDATORY,
        fix="Set versioning: {enabled: true} on the bucket.",
    ),
    ResourceRule(
        "gcs-bucket-public-access-prevented",
        "GCS buckets set publicAccessPrevention: enforced.",
        "Checkpoints hold model weights and training data; no IAM grant may ever make them public.",
        _check_public_access,
        MANDATORY,
        fix="Set publicAccessPrevention: enforced on the bucket.",
    ),
    ResourceRule(
        "gcs-bucket-soft-delete",
        "GCS buckets keep deleted objects restorable for at least minSoftDeleteDays.",
        "A training identity may delete its own objects and their versions (GCS has no separate "
        "permission for versions); soft delete keeps them restorable.",
        _check_soft_delete,
        ADVISORY,
        config={"minSoftDeleteDays": {"type": "integer", "minimum": 1, "default": 7}},
        fix=(
            "Set softDeletePolicy.retentionDurationSeconds to at least minSoftDeleteDays days on "
            "the bucket."
        ),
    ),
    ResourceRule(
        "gcs-bucket-lifecycle",
        "GCS buckets delete noncurrent versions and abort incomplete multipart uploads.",
        "Versioned checkpoint buckets otherwise grow without bound.",
        _check_lifecycle,
        ADVISORY,
        config={"maxNoncurrentDays": {"type": "integer", "minimum": 1, "default": 90}},
        fix=(
            "Add lifecycle rules that Delete noncurrent versions (daysSinceNoncurrentTime at most "
            "maxNoncurrentDays) and AbortIncompleteMultipartUpload."
        ),
    ),
    StackRule(
        "gcs-bucket-cmek",
        "GCS buckets are encrypted by default with a KMS crypto key of the stack that rotates "
        "within maxRotationDays.",
        "A customer key lets the platform team audit and revoke access to checkpoints; "
        "rotation limits what one leaked key version exposes.",
        _check_cmek,
        ADVISORY,
        config=ROTATION,
        fix=(
            "Set encryption.defaultKmsKeyName to a KMS crypto key of the stack whose "
            "rotationPeriod is at most maxRotationDays, and let the project's Cloud Storage "
            "service agent use it."
        ),
    ),
    ResourceRule(
        "gcp-kms-key-rotation",
        "KMS crypto keys rotate within maxRotationDays (rotationPeriod).",
        "Rotation limits the blast radius of a compromised key version.",
        _check_key_rotation,
        ADVISORY,
        config=ROTATION,
        fix=(
            "Set rotationPeriod on the crypto key to maxRotationDays or less (in seconds, e.g. "
            "7776000s for 90 days)."
        ),
    ),
]
