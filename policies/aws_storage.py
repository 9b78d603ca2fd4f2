"""Checkpoint storage on AWS: versioned, lifecycled, encrypted with a rotating customer key,
private, TLS only.

pulumi-aws v7 splits a bucket's settings into resources of their own (BucketVersioning,
BucketLifecycleConfiguration, ...), so these are stack checks: for each bucket, look for the
resource that configures it.
"""

from __future__ import annotations

from pulumi_policy import PolicyResource

from policies.inputs import as_list, dig, of_type, refers_to, statements
from policies.rule import ADVISORY, MANDATORY, ResourceRule, StackRule

BUCKET = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
VERSIONING = (
    "aws:s3/bucketVersioning:BucketVersioning",
    "aws:s3/bucketVersioningV2:BucketVersioningV2",
)
LIFECYCLE = (
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketLifecycleConfigurationV2:BucketLifecycleConfigurationV2",
)
ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
PUBLIC_ACCESS_BLOCK = ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",)
BUCKET_POLICY = ("aws:s3/bucketPolicy:BucketPolicy",)
KMS_KEY = ("aws:kms/key:Key",)
PUBLIC_ACCESS_FLAGS = (
    "blockPublicAcls",
    "blockPublicPolicy",
    "ignorePublicAcls",
    "restrictPublicBuckets",
)


def _configuring(resources: list[PolicyResource], types: tuple[str, ...], bucket: PolicyResource):
    return [r for r in of_type(resources, *types) if refers_to(r, "bucket", bucket)]


def _each_bucket(args):
    return of_type(args.resources, *BUCKET)


def _check_versioning(args, report_violation, _settings) -> None:
    for bucket in _each_bucket(args):
        inline = dig(bucket.props, "versioning", "enabled") is True
        separate = any(
            dig(v.props, "versioningConfiguration", "status") == "Enabled"
            for v in _configuring(args.resources, VERSIONING, bucket)
        )
        if not (inline or separate):
            report_violation(
                f"bucket '{bucket.name}' has no BucketVersioning with status Enabled", bucket.urn
            )


def _enabled_rules(lifecycle: PolicyResource) -> list:
    return [r for r in as_list(lifecycle.props.get("rules")) if dig(r, "status") == "Enabled"]


def _check_lifecycle(args, report_violation, settings) -> None:
    max_noncurrent = settings["maxNoncurrentDays"]
    max_abort = settings["maxAbortMultipartDays"]
    for bucket in _each_bucket(args):
        rules = [
            rule
            for lifecycle in _configuring(args.resources, LIFECYCLE, bucket)
            for rule in _enabled_rules(lifecycle)
        ]
        noncurrent = [dig(r, "noncurrentVersionExpiration", "noncurrentDays") for r in rules]
        abort = [dig(r, "abortIncompleteMultipartUpload", "daysAfterInitiation") for r in rules]
        if not any(days is not None and days <= max_noncurrent for days in noncurrent):
            report_violation(
                f"bucket '{bucket.name}' needs an enabled lifecycle rule that expires noncurrent "
                f"versions within {max_noncurrent:g} days",
                bucket.urn,
            )
        if not any(days is not None and days <= max_abort for days in abort):
            report_violation(
                f"bucket '{bucket.name}' needs an enabled lifecycle rule that aborts incomplete "
                f"multipart uploads within {max_abort:g} days",
                bucket.urn,
            )


def _rotating_keys(args) -> list[PolicyResource]:
    return [
        k for k in of_type(args.resources, *KMS_KEY) if k.props.get("enableKeyRotation") is True
    ]


def _check_encryption(args, report_violation, _settings) -> None:
    rotating = _rotating_keys(args)
    for bucket in _each_bucket(args):
        good = False
        for sse in _configuring(args.resources, ENCRYPTION, bucket):
            for rule in as_list(sse.props.get("rules")):
                default = dig(rule, "applyServerSideEncryptionByDefault", default={})
                if dig(default, "sseAlgorithm") not in ("aws:kms", "aws:kms:dsse"):
                    continue
                if dig(default, "kmsMasterKeyId") is None:
                    continue
                good = good or any(refers_to(sse, "rules", key) for key in rotating)
        if not good:
            report_violation(
                f"bucket '{bucket.name}' is not encrypted with aws:kms under a customer KMS key "
                "of this stack that has enableKeyRotation",
                bucket.urn,
            )


def _check_public_access(args, report_violation, _settings) -> None:
    for bucket in _each_bucket(args):
        blocks = _configuring(args.resources, PUBLIC_ACCESS_BLOCK, bucket)
        if not any(all(b.props.get(flag) is True for flag in PUBLIC_ACCESS_FLAGS) for b in blocks):
            report_violation(
                f"bucket '{bucket.name}' has no BucketPublicAccessBlock with all of "
                f"{', '.join(PUBLIC_ACCESS_FLAGS)} set to true",
                bucket.urn,
            )


def _denies_insecure_transport(statement) -> bool:
    secure = dig(statement, "Condition", "Bool", "aws:SecureTransport")
    actions = as_list(statement.get("Action"))
    return (
        statement.get("Effect") == "Deny"
        and str(secure).lower() == "false"
        and any(a in ("s3:*", "*") for a in actions)
    )


def _check_tls_only(args, report_violation, _settings) -> None:
    for bucket in _each_bucket(args):
        policies = _configuring(args.resources, BUCKET_POLICY, bucket)
        if not any(
            _denies_insecure_transport(s)
            for p in policies
            for s in statements(p.props.get("policy"))
        ):
            report_violation(
                f"bucket '{bucket.name}' has no bucket policy that denies s3:* when "
                "aws:SecureTransport is false",
                bucket.urn,
            )


def _check_key_rotation(args, report_violation, _settings) -> None:
    if args.resource_type not in KMS_KEY:
        return
    if args.props.get("enableKeyRotation") is not True:
        report_violation(f"KMS key '{args.name}' does not set enableKeyRotation: true")


POLICIES = [
    StackRule(
        "s3-bucket-versioning-enabled",
        "Every S3 bucket has versioning enabled (a BucketVersioning resource with status Enabled).",
        "Versioning is the second line of defence for checkpoints: an overwritten or deleted "
        "manifest can be restored.",
        _check_versioning,
        MANDATORY,
        fix=(
            "Give the bucket an aws.s3.BucketVersioning with status Enabled "
            "(components/aws/storage.py's CheckpointBucket does)."
        ),
    ),
    StackRule(
        "s3-bucket-lifecycle",
        "Every S3 bucket has enabled lifecycle rules that expire noncurrent versions and abort "
        "incomplete multipart uploads.",
        "Versioned checkpoint buckets otherwise grow without bound, and abandoned multipart "
        "uploads of preempted writers are billed forever.",
        _check_lifecycle,
        ADVISORY,
        config={
            "maxNoncurrentDays": {"type": "integer", "minimum": 1, "default": 90},
            "maxAbortMultipartDays": {"type": "integer", "minimum": 1, "default": 7},
        },
        fix=(
            "Add an aws.s3.BucketLifecycleConfiguration with an enabled rule that expires "
            "noncurrent versions within maxNoncurrentDays and one that aborts incomplete multipart "
            "uploads within maxAbortMultipartDays (stack config: aws.checkpoint_storage)."
        ),
    ),
    StackRule(
        "s3-bucket-kms-encryption",
        "Every S3 bucket is encrypted with aws:kms under a customer KMS key of the stack that "
        "has rotation enabled.",
        "A customer key lets the platform team audit and revoke access to checkpoints; "
        "rotation limits what one leaked key version exposes.",
        _check_encryption,
        ADVISORY,
        fix=(
            "Add an aws.s3.BucketServerSideEncryptionConfiguration with sseAlgorithm aws:kms and "
            "kmsMasterKeyId a KMS key of the stack created with enableKeyRotation true."
        ),
    ),
    StackRule(
        "s3-bucket-public-access-blocked",
        "Every S3 bucket has a BucketPublicAccessBlock with all four flags set to true.",
        "Checkpoints hold model weights and training data; they must never become public.",
        _check_public_access,
        MANDATORY,
        fix=(
            "Add an aws.s3.BucketPublicAccessBlock for the bucket with blockPublicAcls, "
            "blockPublicPolicy, ignorePublicAcls and restrictPublicBuckets all true."
        ),
    ),
    StackRule(
        "s3-bucket-tls-only",
        "Every S3 bucket has a bucket policy that denies s3:* when aws:SecureTransport is false.",
        "Checkpoints and credentials-bearing requests must never travel in clear text.",
        _check_tls_only,
        MANDATORY,
        fix=(
            "Add an aws.s3.BucketPolicy statement that denies s3:* on the bucket and its objects "
            "when the condition Bool aws:SecureTransport is false."
        ),
    ),
    ResourceRule(
        "kms-key-rotation-enabled",
        "Customer-managed KMS keys have automatic rotation enabled.",
        "Rotation limits the blast radius of a compromised key version.",
        _check_key_rotation,
        ADVISORY,
        fix="Set enableKeyRotation: true on the aws.kms.Key.",
    ),
]
