"""Runs one Pulumi program on Pulumi's mock engine and writes what it registered as JSON.

Pulumi's runtime state is process-global, so `spotctl.preview` starts this module in a fresh
interpreter per preview:
`python -m spotctl.preview_engine PROGRAM_DIR STACK OUT_JSON [--strict-deprecations]`.
Exit status: 0 = previewed, 2 = the program rejected its input (pulumi.RunError, e.g. a config
error), 1 = the program crashed. On 1 and 2, OUT_JSON holds {"error": message}.

The mock engine answers like a cloud would on `pulumi up`: every resource gets an id, an ARN and
a physical name in the provider's formats, so no program has to special-case a preview.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import runpy
import sys
import traceback
import uuid
import warnings
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format
from pulumi.output import Unknown
from pulumi.runtime import mocks, rpc
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from spotctl import preview_gcp

ACCOUNT_ID = "123456789012"
# Lookups that find nothing in the new, empty account a preview stands for.
MISSING_IN_AN_EMPTY_ACCOUNT = ("aws:iam/getRole:getRole", "aws:iam/getUser:getUser")
DEFAULT_REGION = "us-east-1"


class ProgramInputError(Exception):
    """The program directory or its stack files cannot be previewed as given."""


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI reads it: a key written twice in one mapping is an error, not the
    last value silently winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool):
                continue  # the base class refuses what cannot be a key
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    problem=f"key {key!r} appears twice in one mapping",
                    problem_mark=key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's document; anything unreadable is a one-line ProgramInputError naming the
    place."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProgramInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ProgramInputError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProgramInputError(f"{where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise ProgramInputError(f"{path}: not a config: nested too deeply") from None
    except ValueError as exc:  # an integer literal longer than Python converts
        raise ProgramInputError(f"{path}: not a config: {str(exc).split(';')[0]}") from None


def load_project(program_dir: Path) -> dict[str, Any]:
    """Pulumi.yaml of the program, with the keys the CLI defaults filled in."""
    for name in ("Pulumi.yaml", "Pulumi.yml"):
        path = program_dir / name
        if path.is_file():
            project = read_yaml(path) or {}
            if not isinstance(project, dict) or not project.get("name"):
                raise ProgramInputError(f"{path}: a Pulumi project file needs a 'name'")
            return project
    raise ProgramInputError(f"{program_dir}: no Pulumi.yaml (not a Pulumi program directory)")


# What Pulumi allows in a stack name: letters, digits, '-', '_' and '.' (never a path).
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def stack_file(program_dir: Path, project: dict[str, Any], stack: str) -> Path:
    if not STACK_NAME.fullmatch(stack) or stack.strip(".") == "":
        raise ProgramInputError(
            f"{stack!r} is not a stack name (letters, digits, '-', '_' and '.')"
        )
    config_dir = program_dir / project.get("stackConfigDir", ".")
    for suffix in ("yaml", "yml"):
        path = config_dir / f"Pulumi.{stack}.{suffix}"
        if path.is_file():
            return path
    known = sorted(p.name.split(".")[1] for p in config_dir.glob("Pulumi.*.y*ml"))
    raise ProgramInputError(
        f"no stack {stack!r} in {config_dir} (stacks there: {', '.join(known) or 'none'})"
    )


def stack_config(path: Path, project_name: str) -> tuple[dict[str, str], list[str]]:
    """The stack's `config:` as the CLI hands it to a program: namespaced keys, string values.

    Structured values travel JSON-encoded; scalars as their string form; `secure:` values cannot
    be decrypted offline and become a placeholder marked secret.
    """
    document = read_yaml(path) or {}
    if not isinstance(document, dict):
        raise ProgramInputError(f"{path}: a stack file must be a mapping with a 'config' key")
    raw = document.get("config") or {}
    if not isinstance(raw, dict):
        raise ProgramInputError(f"{path}: 'config' must be a mapping")
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ProgramInputError(f"{path}: config key {key!r} is not a string; quote it")
        full_key = key if ":" in key else f"{project_name}:{key}"
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[full_key] = "[secret]"
            secret_keys.append(full_key)
        else:
            config[full_key] = _config_string(value)
    return config, secret_keys


def program_config(
    program_dir: Path, project: dict[str, Any], stack: str
) -> tuple[dict[str, str], list[str]]:
    """The config a program sees: Pulumi.yaml's `config:` defaults, overridden by the stack's."""
    config = {}
    for key, declared in (project.get("config") or {}).items():
        full_key = key if ":" in key else f"{project['name']}:{key}"
        if not isinstance(declared, dict):
            config[full_key] = _config_string(declared)
        elif "value" in declared or "default" in declared:
            config[full_key] = _config_string(declared.get("value", declared.get("default")))
    values, secret_keys = stack_config(stack_file(program_dir, project, stack), project["name"])
    return {**config, **values}, secret_keys


def _config_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


def _hex(seed: str, length: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:length]


def _plain(value: Any) -> Any:
    """Wire-format property value -> JSON: secrets unwrapped, resource references as URNs, values
    not known until deploy as the engine's unknown marker (as `pulumi preview --json` writes
    them)."""
    if isinstance(value, Unknown):
        return rpc.UNKNOWN
    if isinstance(value, dict):
        signature = value.get(rpc._special_sig_key)
        if signature == rpc._special_secret_sig:
            return _plain(value.get("value"))
        if signature == rpc._special_resource_sig:
            return value.get("urn")
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class CloudMocks(mocks.Mocks):
    """Answers resource registrations and invokes with cloud-shaped values."""

    def __init__(
        self,
        region: str,
        gcp_project: str = preview_gcp.DEFAULT_PROJECT,
        gcp_region: str = preview_gcp.DEFAULT_REGION,
    ) -> None:
        self.default_region = region
        self.provider_regions: dict[str, str] = {}
        self.gcp_default = (gcp_project, gcp_region)
        self.gcp_providers: dict[str, tuple[str, str]] = {}

    def gcp_scope(self, provider_ref: str | None) -> tuple[str, str]:
        """(project, region) of a pulumi-gcp resource: its provider's, or the stack config's."""
        return self.gcp_providers.get(provider_ref or "", self.gcp_default)

    def region_of(self, provider_ref: str | None) -> str:
        return self.provider_regions.get(provider_ref or "", self.default_region)

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str, dict]:
        state = dict(args.inputs)
        resource_id = f"{args.name}-{_hex(args.typ + args.name, 8)}"
        if args.typ.startswith("pulumi:providers:"):
            return _hex(args.typ + args.name, 32), state
        if args.typ.startswith("aws:"):
            resource_id = aws_outputs(args, state, self.region_of(args.provider))
        if args.typ.startswith("gcp:"):
            scope = self.gcp_scope(args.provider)
            resource_id = preview_gcp.gcp_outputs(args.typ, args.name, state, *scope)
        return resource_id, state

    def call(self, args: mocks.MockCallArgs) -> dict:
        region = self.region_of(args.provider)
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
        if args.token.startswith("gcp:"):
            answer = preview_gcp.gcp_invoke(args.token, args.args, *self.gcp_scope(args.provider))
            if answer is not None:
                return answer
        if args.token in MISSING_IN_AN_EMPTY_ACCOUNT:
            # IAM's answer for a role or user that does not exist, as the provider fails it.
            kind = args.token.rsplit(":", 1)[1].removeprefix("get").lower()
            field = "name" if kind == "role" else "userName"
            reason = f"NoSuchEntity: The {kind} with name {args.args.get(field)} cannot be found."
            return {}, [(field, reason)]
        if args.token == "aws:servicequotas/getServiceQuota:getServiceQuota":
            # A new account: no GPU vCPUs until a request is granted.
            return {**args.args, "value": 0.0, "defaultValue": 0.0, "adjustable": True}
        if args.token == "aws:eks/getCluster:getCluster":
            return eks_cluster_state(args.args["name"], region, {})
        return answers.get(args.token, dict(args.args))


def _arn(service: str, region: str, resource: str) -> str:
    return f"arn:aws:{service}:{region}:{ACCOUNT_ID}:{resource}"


def eks_cluster_state(name: str, region: str, state: dict) -> dict:
    issuer_id = _hex(name, 32).upper()
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
    state["vpcConfig"] = {**vpc, "clusterSecurityGroupId": f"sg-{_hex(name + 'sg', 17)}"}
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


def aws_outputs(args: mocks.MockResourceArgs, state: dict, region: str) -> str:
    """Fill the computed outputs pulumi-aws returns after a create; return the physical id."""
    typ, logical = args.typ, args.name
    autoname = f"{logical}-{_hex(typ + logical, 7)}"
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
        physical = f"{EC2_ID_PREFIX[typ]}-{_hex(typ + logical, 17)}"
        state["arn"] = _arn("ec2", region, f"{EC2_ID_PREFIX[typ]}/{physical}")
        state.setdefault("ownerId", ACCOUNT_ID)
        if typ == "aws:ec2/vpc:Vpc":
            state["defaultSecurityGroupId"] = f"sg-{_hex(logical + 'default', 17)}"
            state["mainRouteTableId"] = f"rtb-{_hex(logical + 'main', 17)}"
        if typ == "aws:ec2/eip:Eip":
            state["publicIp"] = f"198.51.100.{int(_hex(logical, 2), 16) % 250 + 1}"
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
            state["uniqueId"] = "AROA" + _hex(logical, 17).upper()
        return name
    if module == "kms":
        if typ == "aws:kms/key:Key":
            key_id = str(uuid.UUID(_hex(logical, 32)))
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
            arn=_arn("eks", region, f"nodegroup/{cluster}/{name}/{_hex(name, 8)}"),
            status="ACTIVE",
            resources=[
                {
                    "autoscalingGroups": [{"name": f"eks-{name}-{_hex(name + 'asg', 8)}"}],
                    "remoteAccessSecurityGroupId": "",
                }
            ],
        )
        return f"{cluster}:{name}"
    if typ == "aws:eks/podIdentityAssociation:PodIdentityAssociation":
        association = f"a-{_hex(logical, 17)}"
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


class RecordingMonitor(mocks.MockMonitor):
    """The mock monitor, also recording what the engine learns about each registration."""

    def __init__(self, cloud_mocks: CloudMocks) -> None:
        super().__init__(cloud_mocks)
        self.registrations: list[dict[str, Any]] = []

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # As the engine does: the root stack never qualifies its children's types.
        if parent.split("::")[2:3] == ["pulumi:pulumi:Stack"]:
            parent = ""
        return super().make_urn(parent, type_, name)

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type.startswith("pulumi:providers:"):
            region = json_format.MessageToDict(request.object).get("region")
            self.mocks.provider_regions[f"{response.urn}::{response.id}"] = (
                region or self.mocks.default_region
            )
            if request.type == "pulumi:providers:gcp":
                provider = json_format.MessageToDict(request.object)
                project, default_region = self.mocks.gcp_default
                self.mocks.gcp_providers[f"{response.urn}::{response.id}"] = (
                    provider.get("project") or project,
                    region or default_region,
                )
        inputs = _plain(json_format.MessageToDict(request.object))
        registered = self.resources.get(response.urn)
        self.registrations.append(
            {
                "urn": response.urn,
                "id": response.id or None,
                "type": request.type,
                "name": request.name,
                "parent": request.parent or None,
                "custom": bool(request.custom),
                "inputs": inputs,
                "outputs": _plain(registered.state) if registered else {},
                "dependencies": list(request.dependencies),
                "provider": request.provider or None,
                "ignore_changes": list(request.ignoreChanges),
                "error_hooks": list(request.hooks.on_error),
            }
        )
        return response


class Diagnostics(logging.Handler):
    """Collects what the program logs through the engine (`pulumi.log.*`), as the CLI shows it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelname.lower(), record.getMessage()))


def strict_deprecations() -> None:
    """Every deprecation pulumi-aws reports becomes an error: deprecated resources (an engine
    warning) and deprecated properties of its Args classes (a DeprecationWarning).

    pulumi-aws also warns at import time about every deprecated class a module defines, whether
    used or not ("X has been deprecated in favor of Y"); those say nothing about the program.
    """
    warnings.filterwarnings("error", category=DeprecationWarning, module=r"pulumi_aws\.")
    warnings.filterwarnings(
        "ignore", message=r".* has been deprecated in favor of ", category=DeprecationWarning
    )


def run(program_dir: Path, stack: str, diagnostics: Diagnostics) -> list[dict[str, Any]]:
    project = load_project(program_dir)
    config, secret_keys = program_config(program_dir, project, stack)
    main = (program_dir / project.get("main", ".")).resolve()
    os.chdir(program_dir)
    sys.path.insert(0, str(main if main.is_dir() else main.parent))
    pulumi.runtime.set_all_config(config, secret_keys)
    logger = logging.getLogger("spotctl.preview_engine")
    logger.propagate = False
    logger.addHandler(diagnostics)
    monitor = RecordingMonitor(
        CloudMocks(
            config.get("aws:region", DEFAULT_REGION),
            gcp_project=config.get("gcp:project", preview_gcp.DEFAULT_PROJECT),
            gcp_region=config.get("gcp:region", preview_gcp.DEFAULT_REGION),
        )
    )
    pulumi.runtime.set_mocks(
        monitor.mocks,
        project=project["name"],
        stack=stack,
        preview=True,
        logger=logger,
        monitor=monitor,
    )
    _sync_await(run_pulumi_func(lambda: runpy.run_path(str(main), run_name="__main__")))
    return monitor.registrations


def main(argv: list[str]) -> int:
    program_dir, stack, out = Path(argv[0]).resolve(), argv[1], Path(argv[2]).resolve()
    strict = "--strict-deprecations" in argv[3:]
    if strict:
        strict_deprecations()
    diagnostics = Diagnostics()
    try:
        result, status = {"resources": run(program_dir, stack, diagnostics)}, 0
    except (pulumi.RunError, ProgramInputError) as exc:
        result, status = {"error": str(exc)}, 2
    except DeprecationWarning as exc:  # raised only in strict mode
        result, status = {"error": f"uses deprecated pulumi-aws API: {exc}"}, 2
    except Exception:  # noqa: BLE001 - a crashing program is reported, with its traceback
        result, status = {"error": traceback.format_exc()}, 1
    # As `pulumi preview` does: an error logged by the program fails the preview.
    failures = [m for level, m in diagnostics.messages if level in ("error", "critical")]
    if strict:
        failures += [m for _, m in diagnostics.messages if "deprecated" in m.lower()]
    if failures and status == 0:
        result, status = {"error": "\n".join(failures)}, 1
    result["diagnostics"] = diagnostics.messages
    out.write_text(json.dumps(result))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
