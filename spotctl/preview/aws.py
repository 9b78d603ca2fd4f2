"""How the mock engine answers pulumi-aws: ids, ARNs and physical names in the formats AWS returns
after a create, and the data sources a program reads, as a new, empty account would answer them.

Values are derived from the logical name, so a preview is reproducible.
"""

from __future__ import annotations

import uuid

from spotctl.preview.ids import stable_hex

ACCOUNT_ID = "123456789012"
# Lookups that find nothing in the new, empty account a preview stands for.
MISSING_IN_AN_EMPTY_ACCOUNT = ("aws:iam/getRole:getRole", "aws:iam/getUser:getUser")
DEFAULT_REGION = "us-east-1"


def aws_invoke(token: str, args: dict, region: str) -> dict | tuple[dict, list] | None:
    """The answer to a pulumi-aws data source (or the provider's failure, as (outputs,
    failures)), or None for one this engine does not model."""
    if token in MISSING_IN_AN_EMPTY_ACCOUNT:
        # IAM's answer for a role or user that does not exist, as the provider fails it.
        kind = token.rsplit(":", 1)[1].removeprefix("get").lower()
        field = "name" if kind == "role" else "userName"
        reason = f"NoSuchEntity: The {kind} with name {args.get(field)} cannot be found."
        return {}, [(field, reason)]
    if token == "aws:servicequotas/getServiceQuota:getServiceQuota":
        # A new account: no GPU vCPUs until a request is granted.
        return {**args, "value": 0.0, "defaultValue": 0.0, "adjustable": True}
    if token == "aws:eks/getCluster:getCluster":
        return eks_cluster_state(args["name"], region, {})
    answers = {
        "aws:index/getCallerIdentity:getCallerIdentity": {
            "accountId": ACCOUNT_ID,
            "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/preview",
            "userId": "AIDAPREVIEW",
            "id": ACCOUNT_ID,
        },
        "aws:index/getRegion:getRegion": {
            "name": region,
            "region": region,
            "id": region,
            "endpoint": f"ec2.{region}.amazonaws.com",
        },
        "aws:index/getPartition:getPartition": {
            "partition": "aws",
            "dnsSuffix": "amazonaws.com",
            "id": "aws",
        },
        "aws:index/getAvailabilityZones:getAvailabilityZones": {
            "names": [f"{region}{z}" for z in "abc"],
            "zoneIds": [f"use1-az{i}" for i in (1, 2, 3)],
            "id": region,
        },
    }
    return answers.get(token)


def _arn(service: str, region: str, resource: str) -> str:
    return f"arn:aws:{service}:{region}:{ACCOUNT_ID}:{resource}"


def eks_cluster_state(name: str, region: str, state: dict) -> dict:
    issuer_id = stable_hex(name, 32).upper()
    state.update(
        name=name,
        arn=_arn("eks", region, f"cluster/{name}"),
        endpoint=f"https://{issuer_id}.gr7.{region}.eks.amazonaws.com",
        certificateAuthority={"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="},
        certificateAuthorities=[{"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="}],
        identities=[
            {"oidcs": [{"issuer": f"https://oidc.eks.{region}.amazonaws.com/id/{issuer_id}"}]}
        ],
        status="ACTIVE",
        platformVersion="eks.1",
    )
    state.setdefault("version", "1.35")
    vpc = state.get("vpcConfig") or {}
    state["vpcConfig"] = {**vpc, "clusterSecurityGroupId": f"sg-{stable_hex(name + 'sg', 17)}"}
    return state


# Physical id prefixes EC2 gives its resources.
EC2_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc",
    "aws:ec2/subnet:Subnet": "subnet",
    "aws:ec2/internetGateway:InternetGateway": "igw",
    "aws:ec2/natGateway:NatGateway": "nat",
    "aws:ec2/eip:Eip": "eipalloc",
    "aws:ec2/routeTable:RouteTable": "rtb",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc",
    "aws:ec2/securityGroup:SecurityGroup": "sg",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce",
}


def aws_outputs(typ: str, logical: str, state: dict, region: str) -> str:
    """Fill the computed outputs pulumi-aws returns after a create; return the physical id."""
    autoname = f"{logical}-{stable_hex(typ + logical, 7)}"
    module = typ.split(":")[1].split("/")[0]
    if module == "s3":
        bucket = state.setdefault("bucket", autoname.lower()[:63])
        if typ == "aws:s3/bucket:Bucket":
            state.update(
                arn=f"arn:aws:s3:::{bucket}",
                bucketDomainName=f"{bucket}.s3.amazonaws.com",
                bucketRegionalDomainName=f"{bucket}.s3.{region}.amazonaws.com",
                region=region,
            )
        return bucket
    if typ in EC2_ID_PREFIX:
        physical = f"{EC2_ID_PREFIX[typ]}-{stable_hex(typ + logical, 17)}"
        state["arn"] = _arn("ec2", region, f"{EC2_ID_PREFIX[typ]}/{physical}")
        state.setdefault("ownerId", ACCOUNT_ID)
        if typ == "aws:ec2/vpc:Vpc":
            state["defaultSecurityGroupId"] = f"sg-{stable_hex(logical + 'default', 17)}"
            state["mainRouteTableId"] = f"rtb-{stable_hex(logical + 'main', 17)}"
        if typ == "aws:ec2/eip:Eip":
            state["publicIp"] = f"198.51.100.{int(stable_hex(logical, 2), 16) % 250 + 1}"
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state["latestVersion"] = 1
        return physical
    if module == "iam":
        name = state.setdefault("name", autoname[:64])
        kind = {"role": "role", "policy": "policy", "openIdConnectProvider": "oidc-provider"}
        resource = typ.split("/")[1].split(":")[0]
        if resource in kind:
            path = state.get("path", "/")
            state["arn"] = f"arn:aws:iam::{ACCOUNT_ID}:{kind[resource]}{path}{name}"
            state["uniqueId"] = "AROA" + stable_hex(logical, 17).upper()
        return name
    if module == "kms":
        if typ == "aws:kms/key:Key":
            key_id = str(uuid.UUID(stable_hex(logical, 32)))
            state.update(keyId=key_id, arn=_arn("kms", region, f"key/{key_id}"))
            return key_id
        name = state.setdefault("name", f"alias/{autoname}")
        state["arn"] = _arn("kms", region, name)
        return name
    if module == "sqs" and typ == "aws:sqs/queue:Queue":
        name = state.setdefault("name", autoname[:80])
        url = f"https://sqs.{region}.amazonaws.com/{ACCOUNT_ID}/{name}"
        state.update(arn=_arn("sqs", region, name), url=url)
        return url
    if module == "sns" and typ == "aws:sns/topic:Topic":
        name = state.setdefault("name", autoname)
        state["arn"] = _arn("sns", region, name)
        return state["arn"]
    if module == "cloudwatch":
        name = state.setdefault("name", autoname)
        service_resource = {
            "aws:cloudwatch/eventRule:EventRule": ("events", f"rule/{name}"),
            "aws:cloudwatch/metricAlarm:MetricAlarm": ("cloudwatch", f"alarm:{name}"),
            "aws:cloudwatch/logGroup:LogGroup": ("logs", f"log-group:{name}"),
        }.get(typ)
        if typ == "aws:cloudwatch/dashboard:Dashboard":
            dashboard = state["dashboardName"]
            state["dashboardArn"] = f"arn:aws:cloudwatch::{ACCOUNT_ID}:dashboard/{dashboard}"
            return dashboard
        if service_resource:
            state["arn"] = _arn(service_resource[0], region, service_resource[1])
        return name
    if typ == "aws:ecr/repository:Repository":
        name = state.setdefault("name", autoname.lower())
        state.update(
            arn=_arn("ecr", region, f"repository/{name}"),
            registryId=ACCOUNT_ID,
            repositoryUrl=f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com/{name}",
        )
        return name
    if typ == "aws:eks/cluster:Cluster":
        eks_cluster_state(state.setdefault("name", autoname), region, state)
        return state["name"]
    if typ == "aws:eks/nodeGroup:NodeGroup":
        cluster = state.get("clusterName", "cluster")
        name = state.setdefault("nodeGroupName", autoname)
        state.update(
            arn=_arn("eks", region, f"nodegroup/{cluster}/{name}/{stable_hex(name, 8)}"),
            status="ACTIVE",
            resources=[
                {
                    "autoscalingGroups": [{"name": f"eks-{name}-{stable_hex(name + 'asg', 8)}"}],
                    "remoteAccessSecurityGroupId": "",
                }
            ],
        )
        return f"{cluster}:{name}"
    if typ == "aws:eks/podIdentityAssociation:PodIdentityAssociation":
        association = f"a-{stable_hex(logical, 17)}"
        state.update(
            associationId=association,
            associationArn=_arn(
                "eks", region, f"podidentityassociation/{state.get('clusterName')}/{association}"
            ),
        )
        return f"{state.get('clusterName')},{association}"
    if typ == "aws:servicequotas/serviceQuota:ServiceQuota":
        quota = f"{state.get('serviceCode')}/{state.get('quotaCode')}"
        state.update(arn=_arn("servicequotas", region, quota), adjustable=True, defaultValue=0)
        return quota
    state.setdefault("arn", _arn(module, region, f"{typ.split(':')[-1].lower()}/{autoname}"))
    return autoname
