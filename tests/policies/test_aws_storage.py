"""S3 checkpoint bucket and KMS policies: compliant, violating and missing-property cases."""

from __future__ import annotations

import pytest
from spot_policy_cases import PACK_DIR, TAGS, document, resource

from spotctl.preview.analyzer import PolicyAnalyzer

BUCKET = "aws:s3/bucket:Bucket"
VERSIONING = "aws:s3/bucketVersioning:BucketVersioning"
LIFECYCLE = "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
PAB = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
POLICY = "aws:s3/bucketPolicy:BucketPolicy"
KEY = "aws:kms/key:Key"

TLS_ONLY = document(
    {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": ["arn:aws:s3:::ckpt", "arn:aws:s3:::ckpt/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }
)
LIFECYCLE_RULES = [
    {
        "id": "noncurrent",
        "status": "Enabled",
        "noncurrentVersionExpiration": {"noncurrentDays": 14},
    },
    {
        "id": "mpu",
        "status": "Enabled",
        "abortIncompleteMultipartUpload": {"daysAfterInitiation": 2},
    },
]
FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")


def bucket_stack(**overrides):
    """A compliant checkpoint bucket; overrides replace one part's inputs (None drops it)."""
    bucket = resource(BUCKET, "ckpt", {"bucket": "ckpt", "tags": TAGS})
    key = resource(KEY, "ckpt-key", {"enableKeyRotation": True, "tags": TAGS})
    parts = {
        "versioning": (
            VERSIONING,
            {"bucket": "ckpt", "versioningConfiguration": {"status": "Enabled"}},
        ),
        "lifecycle": (LIFECYCLE, {"bucket": "ckpt", "rules": LIFECYCLE_RULES}),
        "sse": (
            SSE,
            {
                "bucket": "ckpt",
                "rules": [
                    {
                        "applyServerSideEncryptionByDefault": {
                            "sseAlgorithm": "aws:kms",
                            "kmsMasterKeyId": "arn:aws:kms:us-west-2:123456789012:key/k",
                        },
                        "bucketKeyEnabled": True,
                    }
                ],
            },
        ),
        "pab": (PAB, {"bucket": "ckpt", **dict.fromkeys(FLAGS, True)}),
        "policy": (POLICY, {"bucket": "ckpt", "policy": TLS_ONLY}),
    }
    resources = [bucket, key]
    for part, (type_, inputs) in parts.items():
        inputs = overrides.get(part, inputs)
        if inputs is not None:
            deps = (bucket, key) if part == "sse" else (bucket,)
            resources.append(resource(type_, f"ckpt-{part}", inputs, deps=deps))
    return resources


def test_compliant_bucket_passes_every_storage_policy(analyzer):
    report = analyzer.analyze(bucket_stack())
    assert report.violations == []


@pytest.mark.parametrize(
    ("case", "versioning"),
    [
        (
            "violating: suspended",
            {"bucket": "ckpt", "versioningConfiguration": {"status": "Suspended"}},
        ),
        ("missing: no status", {"bucket": "ckpt", "versioningConfiguration": {}}),
        ("missing: no BucketVersioning", None),
    ],
)
def test_versioning(violations, case, versioning):
    found = violations("s3-bucket-versioning-enabled", *bucket_stack(versioning=versioning))
    assert found == ["bucket 'ckpt' has no BucketVersioning with status Enabled"], case


def test_versioning_of_another_bucket_does_not_count(violations):
    other = resource(BUCKET, "other", {"bucket": "other", "tags": TAGS})
    enabled = {"bucket": "ckpt", "versioningConfiguration": {"status": "Enabled"}}
    assert violations(
        "s3-bucket-versioning-enabled", other, resource(VERSIONING, "v", enabled)
    ) == ["bucket 'other' has no BucketVersioning with status Enabled"]


def test_versioning_found_by_literal_bucket_name_without_dependencies(violations):
    bucket = resource(BUCKET, "named", {"bucket": "named-bucket"})
    literal = resource(
        VERSIONING,
        "v",
        {"bucket": "named-bucket", "versioningConfiguration": {"status": "Enabled"}},
    )
    assert violations("s3-bucket-versioning-enabled", bucket, literal) == []


@pytest.mark.parametrize(
    ("case", "rules", "expected"),
    [
        (
            "violating: noncurrent kept a year",
            [
                {**LIFECYCLE_RULES[0], "noncurrentVersionExpiration": {"noncurrentDays": 365}},
                LIFECYCLE_RULES[1],
            ],
            ["noncurrent"],
        ),
        (
            "violating: rule disabled",
            [LIFECYCLE_RULES[0], {**LIFECYCLE_RULES[1], "status": "Disabled"}],
            ["multipart"],
        ),
        ("missing: no abort rule", [LIFECYCLE_RULES[0]], ["multipart"]),
        ("missing: no rules", None, ["noncurrent", "multipart"]),
    ],
)
def test_lifecycle(violations, case, rules, expected):
    lifecycle = None if rules is None else {"bucket": "ckpt", "rules": rules}
    found = violations("s3-bucket-lifecycle", *bucket_stack(lifecycle=lifecycle))
    assert [("noncurrent" if "noncurrent" in m else "multipart") for m in found] == expected, case


def test_lifecycle_threshold_comes_from_policy_config():
    config = {"s3-bucket-lifecycle": {"maxNoncurrentDays": 7}}
    with PolicyAnalyzer(PACK_DIR, project="p", stack="s", policy_config=config) as strict:
        found = [v.message for v in strict.analyze(bucket_stack()).violations]
    assert len(found) == 1 and "within 7 days" in found[0]


@pytest.mark.parametrize(
    ("case", "key_rotation", "sse"),
    [
        ("violating: key without rotation", False, "default"),
        (
            "violating: AES256",
            True,
            {
                "bucket": "ckpt",
                "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}],
            },
        ),
        ("missing: no encryption configuration", True, None),
    ],
)
def test_kms_encryption(violations, case, key_rotation, sse):
    stack = bucket_stack(**({} if sse == "default" else {"sse": sse}))
    stack[1] = resource(KEY, "ckpt-key", {"enableKeyRotation": key_rotation})
    found = violations("s3-bucket-kms-encryption", *stack)
    assert len(found) == 1 and "bucket 'ckpt' is not encrypted with aws:kms" in found[0], case


@pytest.mark.parametrize(
    ("case", "flags"),
    [
        (
            "violating: public policy allowed",
            {**dict.fromkeys(FLAGS, True), "blockPublicPolicy": False},
        ),
        ("missing: one flag unset", dict.fromkeys(FLAGS[:3], True)),
    ],
)
def test_public_access_block(violations, case, flags):
    found = violations(
        "s3-bucket-public-access-blocked", *bucket_stack(pab={"bucket": "ckpt", **flags})
    )
    assert len(found) == 1 and "has no BucketPublicAccessBlock with all of" in found[0], case
    assert violations("s3-bucket-public-access-blocked", *bucket_stack(pab=None)) == found


@pytest.mark.parametrize(
    ("case", "policy"),
    [
        (
            "violating: condition inverted",
            {"bucket": "ckpt", "policy": TLS_ONLY.replace('"false"', '"true"')},
        ),
        (
            "violating: allow, not deny",
            {"bucket": "ckpt", "policy": TLS_ONLY.replace("Deny", "Allow")},
        ),
        ("missing: no policy document", {"bucket": "ckpt"}),
        ("missing: no bucket policy", None),
    ],
)
def test_tls_only(violations, case, policy):
    found = violations("s3-bucket-tls-only", *bucket_stack(policy=policy))
    assert found == [
        "bucket 'ckpt' has no bucket policy that denies s3:* when aws:SecureTransport is false"
    ], case


@pytest.mark.parametrize(
    ("inputs", "violates"),
    [({"enableKeyRotation": True}, False), ({"enableKeyRotation": False}, True), ({}, True)],
    ids=["compliant", "violating", "missing"],
)
def test_key_rotation(violations, inputs, violates):
    found = violations("kms-key-rotation-enabled", resource(KEY, "k", {**inputs, "tags": TAGS}))
    assert found == (["KMS key 'k' does not set enableKeyRotation: true"] if violates else [])
