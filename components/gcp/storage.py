"""The GCS checkpoint bucket: versioned, lifecycle-managed, soft-deleting, encrypted with a
rotating customer key (CMEK), uniform bucket-level access, public access prevented.

GCS serves only HTTPS, so the TLS-only bucket policy of the S3 bucket has no counterpart here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.config.gcp import gcs_bucket_name_problem
from components.gcp.kms import DAY_SECONDS, ServiceKey, ServiceKeyArgs
from components.gcp.services import invoke_options


@dataclass(frozen=True)
class CheckpointBucketArgs:
    project: str
    location: str
    noncurrent_version_days: int = 7
    noncurrent_versions_to_keep: int | None = None
    abort_multipart_days: int = 1
    soft_delete_days: int = 7
    key_rotation_days: int = 90
    bucket_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for attr in ("noncurrent_version_days", "abort_multipart_days"):
            if getattr(self, attr) < 1:
                raise ValueError(f"CheckpointBucketArgs.{attr}: must be at least 1 day")
        if not 7 <= self.soft_delete_days <= 90:
            raise ValueError("CheckpointBucketArgs.soft_delete_days: between 7 and 90")
        problem = self.bucket_name and gcs_bucket_name_problem(self.bucket_name)
        if problem:
            raise ValueError(f"CheckpointBucketArgs.bucket_name: a GCS bucket name {problem}")


class CheckpointBucket(pulumi.ComponentResource):
    bucket: pulumi.Output[str]
    url: pulumi.Output[str]
    kms_key: pulumi.Output[str]

    def __init__(
        self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:CheckpointBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # GCS encrypts and decrypts with the key as its per-project service agent.
        agent = gcp.storage.get_project_service_account_output(
            project=args.project, opts=invoke_options(self, opts)
        )
        key = ServiceKey(
            f"{name}-cmek",
            ServiceKeyArgs(
                project=args.project,
                location=args.location,
                agent_member=agent.member,
                rotation_days=args.key_rotation_days,
                labels=args.labels,
            ),
            opts=child,
        )
        rules = [
            {
                "action": {"type": "Delete"},
                "condition": {
                    "with_state": "ARCHIVED",
                    "days_since_noncurrent_time": args.noncurrent_version_days,
                },
            },
            {
                "action": {"type": "AbortIncompleteMultipartUpload"},
                "condition": {"age": args.abort_multipart_days},
            },
        ]
        if args.noncurrent_versions_to_keep is not None:
            rules.append(
                {
                    "action": {"type": "Delete"},
                    "condition": {
                        "with_state": "ARCHIVED",
                        "num_newer_versions": args.noncurrent_versions_to_keep,
                    },
                }
            )
        # Checkpoints are the product: never let a `pulumi destroy` empty the bucket.
        bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=args.bucket_name,
            project=args.project,
            location=args.location.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning={"enabled": True},
            soft_delete_policy={"retention_duration_seconds": args.soft_delete_days * DAY_SECONDS},
            lifecycle_rules=rules,
            encryption={"default_kms_key_name": key.id},
            force_destroy=False,
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self, protect=True, depends_on=[key.grant]),
        )
        self.bucket, self.url, self.kms_key = bucket.name, bucket.url, key.id
        self.register_outputs({"bucket": self.bucket, "url": self.url, "kms_key": self.kms_key})
