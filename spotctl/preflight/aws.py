"""What only the AWS account knows before a stack's first `pulumi up`, asked with the operator's
own credentials through read-only calls (boto3): who and where, the EC2 Spot service-linked role,
the GPU quotas against what the stack requests and their open requests, the instance types
offered in the pools' zones, the add-on builds offered for the cluster's Kubernetes version, and
whether a fixed bucket name is free."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from components.catalog import catalog
from components.config import StackConfig
from components.config.aws import requested_gpu_vcpus
from components.versions import KUBERNETES_RELEASES
from spotctl.preflight.rows import FAIL, PASS, Check, PreflightError, Row

SPOT_SERVICE = "spot.amazonaws.com"
SPOT_ROLE = "AWSServiceRoleForEC2Spot"
# Service Quotas request states that are still open: a second request for the quota is refused.
OPEN_REQUEST = ("PENDING", "CASE_OPENED")
DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation")
# Errors that mean the credentials themselves do not work: nothing can be asked.
BAD_CREDENTIALS = (
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
)

Clients = Callable[[str], object]  # service name -> boto3 client in the stack's region


def identity(clients: Clients) -> dict:
    """The caller (sts:GetCallerIdentity), or one PreflightError line: without working
    credentials nothing else can be asked."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        return clients("sts").get_caller_identity()
    except NoCredentialsError:
        raise PreflightError(
            "no AWS credentials: `aws configure sso` / `aws sso login`, or set AWS_PROFILE"
        ) from None
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        raise PreflightError(f"AWS refuses these credentials: {code}: {_message(exc)}") from None
    except BotoCoreError as exc:
        raise PreflightError(f"cannot ask AWS: {exc}") from None


def refused(exc: Exception) -> str | None:
    """Why a call the account refused leaves its check open (None: not a refusal)."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return None
    code = exc.response["Error"]["Code"]
    operation = exc.operation_name
    if code in DENIED:
        return f"{operation} denied ({code}): grant it to run this check"
    return f"{operation} failed: {code}: {_message(exc)}"


def checks(settings: StackConfig, stack: str, clients: Clients) -> list[Check]:
    """The checks in the order they run: the identity first, since without it nothing else can
    be asked."""
    aws = settings.aws
    caller = cache(lambda: identity(clients))
    region = settings.region
    stack_file = f"stacks/Pulumi.{stack}.yaml"
    release = KUBERNETES_RELEASES[aws.cluster.create.version] if aws.cluster.create else None

    def who() -> list[Row]:
        return [
            Row(
                "identity",
                PASS,
                f"account {caller()['Account']} as {caller()['Arn']}, stack region {region}",
            )
        ]

    def zones() -> list[Row]:
        from botocore.exceptions import ClientError

        try:
            found = clients("ec2").describe_availability_zones(ZoneNames=list(settings.zones))
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "InvalidParameterValue":
                return [
                    Row(
                        "region",
                        FAIL,
                        f"{_message(exc)} (stack zones {list(settings.zones)})",
                        f"name zones of {region} in {stack_file} (`aws ec2 "
                        f"describe-availability-zones --region {region}`)",
                    )
                ]
            if code in ("OptInRequired", "AuthFailure"):
                return [
                    Row(
                        "region",
                        FAIL,
                        f"{region} is not enabled for account {caller()['Account']} ({code})",
                        f"aws account enable-region --region-name {region}",
                    )
                ]
            raise
        unavailable = [
            z["ZoneName"] for z in found["AvailabilityZones"] if z.get("State") != "available"
        ]
        if unavailable:
            return [Row("region", FAIL, f"zones not available now: {unavailable}")]
        return [Row("region", PASS, f"{region}: zones {list(settings.zones)} available")]

    def spot_role() -> list[Row]:
        from botocore.exceptions import ClientError

        iam = clients("iam")
        try:
            iam.get_role(RoleName=SPOT_ROLE)
            return [Row("spot-service-role", PASS, f"{SPOT_ROLE} exists")]
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "NoSuchEntity":
                raise
        principal = _principal_arn(iam, caller()["Arn"])
        if principal is None:  # the account root may create it
            return [Row("spot-service-role", PASS, f"{SPOT_ROLE} absent; `pulumi up` creates it")]
        result = iam.simulate_principal_policy(
            PolicySourceArn=principal,
            ActionNames=["iam:CreateServiceLinkedRole"],
            ContextEntries=[
                {
                    "ContextKeyName": "iam:AWSServiceName",
                    "ContextKeyValues": [SPOT_SERVICE],
                    "ContextKeyType": "string",
                }
            ],
        )
        decision = result["EvaluationResults"][0]["EvalDecision"]
        if decision == "allowed":
            return [Row("spot-service-role", PASS, f"{SPOT_ROLE} absent; `pulumi up` creates it")]
        return [
            Row(
                "spot-service-role",
                FAIL,
                f"{SPOT_ROLE} absent, and {principal} may not create it ({decision}): every spot "
                "launch would fail with ServiceLinkedRoleCreationNotPermitted",
                f"aws iam create-service-linked-role --aws-service-name {SPOT_SERVICE} "
                "(as an identity that may)",
            )
        ]

    def quotas() -> list[Row]:
        return [
            _quota_row(clients("service-quotas"), capacity, family, need, aws, stack_file)
            for (capacity, family), need in sorted(requested_gpu_vcpus(aws).items())
        ]

    def offerings() -> list[Row]:
        ec2 = clients("ec2")
        pools = [
            (f"gpu_classes[{i}]", c.instance_types, c.pool_zones(settings.zones))
            for i, c in enumerate(settings.gpu_classes)
        ]
        for tier in ("stable", "buffer"):
            pool = getattr(aws.pools, tier)
            if pool is not None:
                pools.append((f"aws.pools.{tier}", pool.instance_types, settings.zones))
        rows = []
        for path, types, pool_zones in pools:
            offered = _offered(ec2, types, pool_zones)
            nowhere = [t for t in types if not offered.get(t)]
            detail = ", ".join(f"{t} in {len(offered.get(t, ()))}/{len(pool_zones)}" for t in types)
            if nowhere:
                rows.append(
                    Row(
                        f"offerings {path}",
                        FAIL,
                        f"{nowhere} offered in none of {list(pool_zones)} ({detail})",
                        f"remove them from {path}.instance_types in {stack_file}, or add zones "
                        "that offer them (`aws ec2 describe-instance-type-offerings --location-"
                        f"type availability-zone --filters Name=instance-type,Values={nowhere[0]}"
                        f" --region {region}`)",
                    )
                )
            else:
                rows.append(Row(f"offerings {path}", PASS, detail))
        return rows

    def addons() -> list[Row]:
        if release is None:
            return [Row("addons", PASS, "attached cluster: its owner manages its add-ons")]
        eks = clients("eks")
        rows = []
        for name, pinned in sorted(release.addons.items()):
            offered = _addon_versions(eks, name, release.version)
            if pinned in offered:
                rows.append(Row(f"addon {name}", PASS, f"{pinned} for {release.version}"))
            else:
                rows.append(
                    Row(
                        f"addon {name}",
                        FAIL,
                        f"{pinned} is not offered for Kubernetes {release.version} in {region} "
                        f"(offered: {', '.join(offered[:3]) or 'none'})",
                        f"pin one of the offered builds in components/versions.py "
                        f"(KUBERNETES_RELEASES[{release.version!r}].addons[{name!r}])",
                    )
                )
        return rows

    def bucket() -> list[Row]:
        from botocore.exceptions import ClientError

        name = aws.checkpoint_storage.bucket_name
        if name is None:
            return [Row("bucket", PASS, "no fixed name: the stack generates a unique one")]
        try:
            clients("s3").head_bucket(Bucket=name)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code in ("404", "NoSuchBucket", "NotFound"):
                return [Row("bucket", PASS, f"{name!r} is free")]
            if code not in ("403", "AccessDenied", "Forbidden"):
                raise
            taken = f"{name!r} belongs to another account (bucket names are global)"
        else:
            taken = f"{name!r} exists already and the stack would not own it"
        return [
            Row(
                "bucket",
                FAIL,
                taken,
                f"choose another aws.checkpoint_storage.bucket_name in {stack_file}",
            )
        ]

    return [
        Check("identity", ("sts:GetCallerIdentity",), who),
        Check("region", ("ec2:DescribeAvailabilityZones",), zones),
        Check("spot-service-role", ("iam:GetRole", "iam:SimulatePrincipalPolicy"), spot_role),
        Check(
            "quotas",
            (
                "servicequotas:GetServiceQuota",
                "servicequotas:GetAWSDefaultServiceQuota",
                "servicequotas:ListRequestedServiceQuotaChangeHistoryByQuota",
            ),
            quotas,
        ),
        Check("offerings", ("ec2:DescribeInstanceTypeOfferings",), offerings),
        Check("addons", ("eks:DescribeAddonVersions",), addons),
        Check("bucket", ("s3:HeadBucket",), bucket),
    ]


def _message(exc) -> str:
    """The first line of an AWS error's message."""
    lines = (exc.response["Error"].get("Message") or "").strip().splitlines()
    return lines[0] if lines else exc.response["Error"]["Code"]


def _principal_arn(iam, caller_arn: str) -> str | None:
    """The IAM ARN whose policies the caller acts with (a role's, with its path); None for the
    account root."""
    kind, _, name = caller_arn.split(":", 5)[5].partition("/")
    if kind == "assumed-role":
        return iam.get_role(RoleName=name.split("/")[0])["Role"]["Arn"]
    if kind == "root":
        return None
    return caller_arn


def _quota_row(quotas, capacity: str, family: str, need: int, aws, stack_file: str) -> Row:
    from botocore.exceptions import ClientError

    expected = catalog("aws").quota_families[capacity][family]
    check = f"quota {expected.code}"
    try:
        quota = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=expected.code)["Quota"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "NoSuchResourceException":
            raise
        quota = quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=expected.code)[
            "Quota"
        ]
    if quota["QuotaName"] != expected.name:
        return Row(
            check,
            FAIL,
            f"is {quota['QuotaName']!r}, not {expected.name!r}",
            f"correct {capacity} {family}'s code in components/catalog.yaml (`aws service-quotas "
            "list-service-quotas --service-code ec2 --query 'Quotas[].[QuotaName,QuotaCode]'`)",
        )
    value = int(quota["Value"])
    history = quotas.list_requested_service_quota_change_history_by_quota(
        ServiceCode="ec2", QuotaCode=expected.code
    )["RequestedQuotas"]
    open_requests = [r for r in history if r["Status"] in OPEN_REQUEST]
    listed = expected.code in aws.open_quota_requests
    field = f"{'spot' if capacity == 'spot' else 'on_demand'}_gpu_quota"
    state = f"{expected.name}: {value} of {need} vCPUs"
    if open_requests and not listed:
        wanted = int(open_requests[0]["DesiredValue"])
        return Row(
            check,
            FAIL,
            f"{state}; a request for {wanted} is open ({open_requests[0]['Status']}), and "
            "Service Quotas refuses the second one the stack would file",
            f"add {expected.code} to aws.open_quota_requests in {stack_file}",
        )
    if listed and not open_requests and value < need:
        return Row(
            check,
            FAIL,
            f"{state}; aws.open_quota_requests lists it but no request is open, so none is filed",
            f"remove {expected.code} from aws.open_quota_requests in {stack_file}",
        )
    if value >= need:
        return Row(check, PASS, state)
    if open_requests:
        wanted = int(open_requests[0]["DesiredValue"])
        return Row(check, PASS, f"{state}; your request for {wanted} is open")
    return Row(check, PASS, f"{state}; `pulumi up` requests {need} (aws.{field})")


def _offered(ec2, types, zones) -> dict[str, set[str]]:
    offered: dict[str, set[str]] = {}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[
            {"Name": "instance-type", "Values": list(types)},
            {"Name": "location", "Values": list(zones)},
        ],
    )
    for page in pages:
        for offering in page["InstanceTypeOfferings"]:
            offered.setdefault(offering["InstanceType"], set()).add(offering["Location"])
    return offered


def _addon_versions(eks, name: str, kubernetes: str) -> list[str]:
    pages = eks.get_paginator("describe_addon_versions").paginate(
        addonName=name, kubernetesVersion=kubernetes
    )
    return [
        version["addonVersion"]
        for page in pages
        for addon in page["addons"]
        for version in addon["addonVersions"]
    ]
