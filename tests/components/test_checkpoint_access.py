"""The checkpoint bucket's identities, measured on an S3 API that enforces IAM (moto's server):
the prod stack's own policy documents, attached to users, against a bucket of the same name.

A team reaches its own prefix only and never deletes a version; platform-admin reads and
restores checkpoints but cannot delete versions, suspend versioning or drop the bucket policy;
break-glass can. moto evaluates actions and resources, not conditions, so the team's listing
condition is measured by what it admits: the broadest prefix it allows is listed on the server.
The KMS grants, which moto does not enforce, are checked on the previewed documents
(test_aws_components).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase

import pytest
from botocore.exceptions import ClientError
from previewed import Preview
from s3_iam import admin_client, client_as, enforce_iam, iam_users
from spotsafe.local.servers import s3_server
from stack_files import stack_values

from components.config import load_config

PROD = load_config(stack_values("prod"))
VISION, LANGUAGE = PROD.teams
# A sibling of vision's prefix that the bare prefix `teams/vision` would also match.
SIBLING = f"{VISION.checkpoint_prefix}-3d"
# Objects with two versions each, one per test that changes them.
KEYS = {
    "team": f"{VISION.checkpoint_prefix}/run/step-1/model.pt",
    "team-delete": f"{VISION.checkpoint_prefix}/run/step-0/model.pt",
    "sibling": f"{SIBLING}/run/step-1/model.pt",
    "other-team": f"{LANGUAGE.checkpoint_prefix}/run/step-1/model.pt",
    "restore": f"{LANGUAGE.checkpoint_prefix}/run/step-0/model.pt",
    "break-glass": f"{SIBLING}/run/step-0/model.pt",
}


def _policy(prod: Preview, name: str) -> dict:
    return json.loads(prod.one("aws:iam/rolePolicy:RolePolicy", name).inputs["policy"])


NO_ACLS = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObjectAcl", "Resource": "*"}
    ],
}


@dataclass
class Bucket:
    name: str
    # One S3 client per identity, each a user whose only policy is that identity's.
    clients: dict[str, object]


@pytest.fixture(scope="module")
def bucket(prod: Preview) -> Iterator[Bucket]:
    name = prod.one("aws:s3/bucket:Bucket").outputs["bucket"]
    arn = prod.one("aws:s3/bucket:Bucket").outputs["arn"]
    policies = {
        "team": _policy(prod, f"-{VISION.name}-training-policy"),
        "platform-admin": _policy(prod, "-roles-platform-admin"),
        "break-glass": _policy(prod, "-roles-break-glass"),
        # To look at the bucket while IAM is enforced.
        "reader": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": ["s3:ListBucket", "s3:ListBucketVersions", "s3:GetObject*"],
                    "Resource": [arn, f"{arn}/*"],
                }
            ],
        },
    }
    with s3_server() as endpoint:
        admin = admin_client(endpoint)
        admin.create_bucket(Bucket=name)
        admin.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        # A bucket policy to remove (moto would apply the stack's TLS-only one to every plain
        # HTTP request: it does not read conditions).
        admin.put_bucket_policy(Bucket=name, Policy=json.dumps(NO_ACLS))
        for key in KEYS.values():
            for body in (b"old", b"new"):
                admin.put_object(Bucket=name, Key=key, Body=body)
        keys = iam_users(endpoint, policies)
        clients = {identity: client_as(key, endpoint) for identity, key in keys.items()}
        enforce_iam(endpoint)
        yield Bucket(name, clients)


def _denied(call, **kwargs) -> bool:
    try:
        call(**kwargs)
    except ClientError as error:
        assert error.response["Error"]["Code"] == "AccessDenied", error.response
        return True
    return False


def _versions(bucket: Bucket, key: str) -> list[str]:
    """Noncurrent version ids of `key`."""
    listed = bucket.clients["reader"].list_object_versions(Bucket=bucket.name, Prefix=key)
    return [v["VersionId"] for v in listed["Versions"] if v["Key"] == key and not v["IsLatest"]]


def test_a_team_reaches_only_its_own_prefix(bucket: Bucket):
    team = bucket.clients["team"]
    own = f"{VISION.checkpoint_prefix}/run/step-2/model.pt"
    team.put_object(Bucket=bucket.name, Key=own, Body=b"weights")
    assert team.get_object(Bucket=bucket.name, Key=own)["Body"].read() == b"weights"
    for key in (KEYS["sibling"], KEYS["other-team"]):
        assert _denied(team.get_object, Bucket=bucket.name, Key=key), key
        assert _denied(team.put_object, Bucket=bucket.name, Key=key, Body=b"x"), key
        assert _denied(team.delete_object, Bucket=bucket.name, Key=key), key


def test_a_team_never_deletes_an_object_version(bucket: Bucket):
    team, key = bucket.clients["team"], KEYS["team-delete"]
    (old,) = _versions(bucket, key)
    assert _denied(team.delete_object, Bucket=bucket.name, Key=key, VersionId=old)
    # Deleting the current object only adds a delete marker: history stays.
    team.delete_object(Bucket=bucket.name, Key=key)
    assert old in _versions(bucket, key)


def test_a_teams_listing_shows_only_its_prefix(prod: Preview, bucket: Bucket):
    """`s3:prefix` StringLike patterns admit every prefix that starts with their literal part;
    listing that literal part on the server shows everything the team can ever list."""
    (listing,) = [
        s
        for s in _policy(prod, f"-{VISION.name}-training-policy")["Statement"]
        if s["Action"] == "s3:ListBucket"
    ]
    patterns = listing["Condition"]["StringLike"]["s3:prefix"]
    for pattern in patterns:
        broadest = pattern.split("*")[0].split("?")[0]
        listed = bucket.clients["reader"].list_objects_v2(Bucket=bucket.name, Prefix=broadest)
        keys = [o["Key"] for o in listed.get("Contents", [])]
        assert keys and all(k.startswith(f"{VISION.checkpoint_prefix}/") for k in keys), keys
    # What the runtime lists, under a run of the team's checkpoint root, stays admitted.
    runtime_prefix = f"{VISION.checkpoint_prefix}/vision-resnet-7/step-"
    assert any(fnmatchcase(runtime_prefix, p) for p in patterns)


def test_the_bare_prefix_would_list_a_sibling(bucket: Bucket):
    """Why the condition ends in `/*`: the bare prefix lists the sibling's checkpoints too."""
    listed = bucket.clients["reader"].list_objects_v2(
        Bucket=bucket.name, Prefix=VISION.checkpoint_prefix
    )
    assert KEYS["sibling"] in [o["Key"] for o in listed["Contents"]]


def test_platform_admin_restores_but_cannot_destroy(bucket: Bucket):
    admin, key = bucket.clients["platform-admin"], KEYS["restore"]
    (old,) = _versions(bucket, key)
    # Restore: read the older version and copy it over the current one.
    assert admin.get_object(Bucket=bucket.name, Key=key, VersionId=old)["Body"].read() == b"old"
    source = {"Bucket": bucket.name, "Key": key, "VersionId": old}
    admin.copy_object(Bucket=bucket.name, Key=key, CopySource=source)
    assert admin.get_object(Bucket=bucket.name, Key=key)["Body"].read() == b"old"
    assert _denied(admin.delete_object, Bucket=bucket.name, Key=key, VersionId=old)
    suspend = {"Status": "Suspended"}
    assert _denied(admin.put_bucket_versioning, Bucket=bucket.name, VersioningConfiguration=suspend)
    assert _denied(admin.delete_bucket_policy, Bucket=bucket.name)
    expire_history = {
        "Rules": [
            {
                "ID": "expire",
                "Status": "Enabled",
                "Filter": {},
                "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
            }
        ]
    }
    assert _denied(
        admin.put_bucket_lifecycle_configuration,
        Bucket=bucket.name,
        LifecycleConfiguration=expire_history,
    )


def test_break_glass_can_change_the_protection(bucket: Bucket):
    glass, key = bucket.clients["break-glass"], KEYS["break-glass"]
    (old,) = _versions(bucket, key)
    glass.delete_object(Bucket=bucket.name, Key=key, VersionId=old)
    assert old not in _versions(bucket, key)
    glass.delete_bucket_policy(Bucket=bucket.name)
    glass.put_bucket_versioning(Bucket=bucket.name, VersioningConfiguration={"Status": "Enabled"})
