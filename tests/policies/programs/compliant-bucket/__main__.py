import json

import pulumi
import pulumi_aws as aws

key = aws.kms.Key("checkpoints", enable_key_rotation=True, deletion_window_in_days=30)
bucket = aws.s3.Bucket("checkpoints")
aws.s3.BucketVersioning(
    "checkpoints",
    bucket=bucket.id,
    versioning_configuration={"status": "Enabled"},
)
aws.s3.BucketLifecycleConfiguration(
    "checkpoints",
    bucket=bucket.id,
    rules=[
        {
            "id": "expire-noncurrent",
            "status": "Enabled",
            "filter": {},
            "noncurrent_version_expiration": {"noncurrent_days": 14},
            "abort_incomplete_multipart_upload": {"days_after_initiation": 2},
        }
    ],
)
aws.s3.BucketServerSideEncryptionConfiguration(
    "checkpoints",
    bucket=bucket.id,
    rules=[
        {
            "apply_server_side_encryption_by_default": {
                "sse_algorithm": "aws:kms",
                "kms_master_key_id": key.arn,
            },
            "bucket_key_enabled": True,
        }
    ],
)
aws.s3.BucketPublicAccessBlock(
    "checkpoints",
    bucket=bucket.id,
    block_public_acls=True,
    block_public_policy=True,
    ignore_public_acls=True,
    restrict_public_buckets=True,
)


def tls_only(arn: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [arn, f"{arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


aws.s3.BucketPolicy("checkpoints", bucket=bucket.id, policy=bucket.arn.apply(tls_only))
pulumi.export("bucket", bucket.id)
