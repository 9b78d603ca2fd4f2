"""The checkpoint bucket: versioned, lifecycle-managed, KMS-encrypted, private, TLS only.

Uses the current pulumi-aws v7 S3 resources: one `aws.s3.Bucket` plus one resource per concern.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.config import Transition


@dataclass(frozen=True)
class CheckpointBucketArgs:
    noncurrent_version_days: int = 7
    noncurrent_versions_to_keep: int | None = None
    abort_multipart_days: int = 1
    transitions: list[Transition] = field(default_factory=list)
    kms_deletion_window_days: int = 30
    bucket_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for attr in ("noncurrent_version_days", "abort_multipart_days"):
            if getattr(self, attr) < 1:
                raise ValueError(f"CheckpointBucketArgs.{attr}: must be at least 1 day")
        if not 7 <= self.kms_deletion_window_days <= 30:
            raise ValueError("CheckpointBucketArgs.kms_deletion_window_days: between 7 and 30")


class CheckpointBucket(pulumi.ComponentResource):
    bucket: pulumi.Output[str]
    arn: pulumi.Output[str]
    kms_key_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:storage:CheckpointBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        key = aws.kms.Key(
            f"{name}-key",
            description="Checkpoint bucket encryption",
            enable_key_rotation=True,
            deletion_window_in_days=args.kms_deletion_window_days,
            tags=args.tags,
            opts=child,
        )
        aws.kms.Alias(
            f"{name}-key", name=f"alias/{name}-checkpoints", target_key_id=key.key_id, opts=child
        )
        # Checkpoints are the product: never let a `pulumi destroy` empty the bucket.
        bucket = aws.s3.Bucket(
            f"{name}-bucket",
            bucket=args.bucket_name,
            force_destroy=False,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        public_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-versioning",
            bucket=bucket.id,
            versioning_configuration={"status": "Enabled"},
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.id,
            rules=[
                {
                    "apply_server_side_encryption_by_default": {
                        "sse_algorithm": "aws:kms",
                        "kms_master_key_id": key.arn,
                    },
                    # No S3 Bucket Key: with one, KMS sees the bucket, not the object, and the
                    # team roles' key grants could not be confined to their prefixes.
                    "bucket_key_enabled": False,
                }
            ],
            opts=child,
        )
        noncurrent = {"noncurrent_days": args.noncurrent_version_days}
        if args.noncurrent_versions_to_keep is not None:
            noncurrent["newer_noncurrent_versions"] = args.noncurrent_versions_to_keep
        rules = [
            {
                "id": "expire-noncurrent-versions",
                "status": "Enabled",
                "filter": {},
                "noncurrent_version_expiration": noncurrent,
            },
            {
                "id": "abort-incomplete-multipart",
                "status": "Enabled",
                "filter": {},
                "abort_incomplete_multipart_upload": {
                    "days_after_initiation": args.abort_multipart_days
                },
            },
        ]
        if args.transitions:
            rules.append(
                {
                    "id": "transition-old-checkpoints",
                    "status": "Enabled",
                    "filter": {},
                    "transitions": [
                        {"days": t.days, "storage_class": t.storage_class} for t in args.transitions
                    ],
                }
            )
        # Lifecycle rules on noncurrent versions need versioning in place first.
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.id,
            rules=rules,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]),
        )
        aws.s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=bucket.id,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "DenyInsecureTransport",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "s3:*",
                            "Resource": [bucket.arn, pulumi.Output.concat(bucket.arn, "/*")],
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        }
                    ],
                }
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[public_block]),
        )
        self.bucket, self.arn, self.kms_key_arn = bucket.bucket, bucket.arn, key.arn
        self.register_outputs({"bucket": self.bucket, "arn": self.arn, "kms_key_arn": key.arn})
