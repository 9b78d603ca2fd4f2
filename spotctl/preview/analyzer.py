"""Runs a policy pack the way the Pulumi CLI does, against previewed resources.

The CLI starts a Python pack through the `pulumi-analyzer-policy-python` shim, which runs
`python -u -m pulumi.policy ENGINE_ADDRESS .` in the pack directory (with the virtualenv named in
PulumiPolicy.yaml), with the stack's config in PULUMI_CONFIG and the stack's identity in
PULUMI_PROJECT / PULUMI_STACK / PULUMI_DRY_RUN. The pack prints the port of its Analyzer gRPC
server on its first stdout line. The CLI then calls Handshake (optional), GetPluginInfo,
ConfigureStack, GetAnalyzerInfo, Configure (the policy config: schema defaults, the pack's
initial config, then the user's --policy-pack-config, validated against each config_schema),
Analyze for each resource and AnalyzeStack over the whole graph. This module does the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import jsonschema
import yaml
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc, engine_pb2_grpc

from spotctl.preview.resources import PreviewResource

LEVELS = {
    analyzer_pb2.ADVISORY: "advisory",
    analyzer_pb2.MANDATORY: "mandatory",
    analyzer_pb2.REMEDIATE: "remediate",
    analyzer_pb2.DISABLED: "disabled",
}
LEVEL_VALUES = {name: value for value, name in LEVELS.items()}
START_TIMEOUT_S = 60
# The policy that reports, at advisory level, each violation a waiver covers (policies/waivers.py).
WAIVED_POLICY = "waived-violation"
# The Python SDK raises the gRPC limit to 400 MB; a large stack's AnalyzeStack needs it too.
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 400 * 1024 * 1024)]


class PolicyPackError(Exception):
    """The pack cannot be run as given: no PulumiPolicy.yaml, a bad config, a pack that dies."""


@dataclass(frozen=True)
class Violation:
    policy: str
    level: str  # "mandatory" or "advisory"
    message: str
    urn: str  # "" for a stack-wide finding


@dataclass
class PolicyReport:
    pack: str
    version: str
    violations: list[Violation] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)  # the pack's output; complete once closed
    # The policy config the pack ran with: each policy's level and thresholds.
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    # What each policy announces of how to fix a violation and where it is explained:
    # {policy: (remediation steps, url)}.
    guidance: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def mandatory(self) -> list[Violation]:
        return [v for v in self.violations if v.level == "mandatory"]

    @property
    def waived(self) -> list[Violation]:
        """What a waiver in the pack's waivers.yaml covers, reported by the pack's own policy."""
        return [v for v in self.violations if v.policy == WAIVED_POLICY]

    def grouped(self) -> dict[str, list[Violation]]:
        """Violations by what they mean: mandatory, advisory, waived."""
        groups = {"mandatory": self.mandatory, "advisory": [], "waived": self.waived}
        groups["advisory"] = [
            v for v in self.violations if v.level == "advisory" and v.policy != WAIVED_POLICY
        ]
        return groups


class _EngineLog(engine_pb2_grpc.EngineServicer):
    """The engine address a plugin is started with: plugins may log through it."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = messages

    def Log(self, request, context):  # noqa: N802 (gRPC method name)
        self.messages.append(f"{request.severity}: {request.message}")
        return empty_pb2.Empty()


def load_pack_project(pack_dir: Path) -> dict[str, Any]:
    path = pack_dir / "PulumiPolicy.yaml"
    if not path.is_file():
        raise PolicyPackError(f"{pack_dir}: no PulumiPolicy.yaml (not a policy pack directory)")
    try:
        project = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise PolicyPackError(f"{path}: not valid YAML ({exc})") from None
    runtime = project.get("runtime") if isinstance(project, dict) else None
    name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if name != "python":
        raise PolicyPackError(f"{path}: runtime must be python (got {name!r})")
    return project


def pack_python(pack_dir: Path, project: Mapping[str, Any]) -> str:
    """The interpreter the shim would use: the pack's virtualenv, else this one."""
    runtime = project["runtime"]
    options = (runtime.get("options") or {}) if isinstance(runtime, dict) else {}
    virtualenv = options.get("virtualenv")
    if not virtualenv:
        return sys.executable
    python = (pack_dir / virtualenv / "bin" / "python").absolute()
    if not python.is_file():
        raise PolicyPackError(
            f"{pack_dir / 'PulumiPolicy.yaml'}: virtualenv {virtualenv!r} has no bin/python"
        )
    return str(python)


def to_struct(properties: Mapping[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(json.loads(json.dumps(properties, default=str)))
    return struct


def read_policy_config(path: Path | None) -> dict[str, dict[str, Any]]:
    """--policy-pack-config's file, parsed (none: {}); a file that cannot be read or is not a
    JSON object is one PolicyPackError line naming it."""
    if path is None:
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8, not JSON
        raise PolicyPackError(f"--policy-pack-config {path}: {exc}") from None
    if not isinstance(document, dict):
        raise PolicyPackError(f"--policy-pack-config {path}: not a JSON object")
    return parse_policy_config(document)


def parse_policy_config(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """--policy-pack-config as the CLI reads it: {policy: level | {enforcementLevel?, ...}}."""
    parsed = {}
    for policy, value in document.items():
        entry = {"enforcementLevel": value} if isinstance(value, str) else value
        if not isinstance(entry, Mapping):
            raise PolicyPackError(f"policy config for {policy!r} must be a level or an object")
        level = entry.get("enforcementLevel")
        if level is not None and level not in LEVEL_VALUES:
            raise PolicyPackError(
                f"policy config for {policy!r}: enforcementLevel {level!r} is not one of "
                f"{', '.join(LEVEL_VALUES)}"
            )
        parsed[policy] = dict(entry)
    return parsed


def reconcile_config(
    info: analyzer_pb2.AnalyzerInfo, given: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Schema defaults, then the pack's initial config, then the user's; validated per policy."""
    result: dict[str, dict[str, Any]] = {}
    schemas: dict[str, dict[str, Any]] = {}
    for policy in info.policies:
        schema = json_format.MessageToDict(policy.configSchema)
        schemas[policy.name] = {"type": "object", **schema}
        defaults = {
            key: prop["default"]
            for key, prop in schema.get("properties", {}).items()
            if "default" in prop
        }
        result[policy.name] = {"enforcementLevel": LEVELS[policy.enforcementLevel], **defaults}
    initial = {
        name: {
            "enforcementLevel": LEVELS[config.enforcementLevel],
            **json_format.MessageToDict(config.properties),
        }
        for name, config in info.initialConfig.items()
    }
    unknown = sorted(set(given) - set(result) - {"all"})
    if unknown:
        raise PolicyPackError(f"policy config names unknown policies: {', '.join(unknown)}")
    for layer in (initial, given):
        if "all" in layer and layer["all"].get("enforcementLevel"):
            for entry in result.values():
                entry["enforcementLevel"] = layer["all"]["enforcementLevel"]
        for name, entry in layer.items():
            if name in result:
                result[name].update({k: v for k, v in entry.items() if v is not None})
    for name, entry in result.items():
        properties = {k: v for k, v in entry.items() if k != "enforcementLevel"}
        for error in jsonschema.Draft7Validator(schemas[name]).iter_errors(properties):
            where = ".".join(map(str, error.absolute_path)) or "(root)"
            raise PolicyPackError(f"policy config for {name!r} at {where}: {error.message}")
    return result


class PolicyAnalyzer:
    """One running policy pack process, configured for one stack. Use as a context manager."""

    def __init__(
        self,
        pack_dir: Path,
        *,
        project: str,
        stack: str,
        stack_config: Mapping[str, str] | None = None,
        policy_config: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.pack_dir = Path(pack_dir).resolve()
        self.project_file = load_pack_project(self.pack_dir)
        self.project, self.stack = project, stack
        self.stack_config = dict(stack_config or {})
        self.policy_config = dict(policy_config or {})
        # What the pack says, through the engine or on its stdout/stderr; complete once closed.
        self._logs: list[str] = []
        self._engine = _EngineLog(self._logs)
        self._drainers: list[threading.Thread] = []
        self._engine_server: grpc.Server | None = None
        self._process: subprocess.Popen | None = None
        self._channel: grpc.Channel | None = None
        self._client: analyzer_pb2_grpc.AnalyzerStub | None = None
        self.info: analyzer_pb2.AnalyzerInfo | None = None
        self.config: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> PolicyAnalyzer:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _start(self) -> None:
        self._engine_server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        engine_pb2_grpc.add_EngineServicer_to_server(self._engine, self._engine_server)
        engine_port = self._engine_server.add_insecure_port("127.0.0.1:0")
        self._engine_server.start()

        env = {
            **os.environ,
            "PULUMI_PROJECT": self.project,
            "PULUMI_STACK": self.stack,
            "PULUMI_DRY_RUN": "true",
            "PULUMI_ORGANIZATION": "organization",
        }
        if self.stack_config:
            env["PULUMI_CONFIG"] = json.dumps(self.stack_config)
        command = [
            pack_python(self.pack_dir, self.project_file),
            *("-u", "-m", "pulumi.policy", f"127.0.0.1:{engine_port}", "."),
        ]
        self._process = subprocess.Popen(
            command,
            cwd=self.pack_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = self._read_port()
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
        grpc.channel_ready_future(self._channel).result(timeout=START_TIMEOUT_S)
        client = self._client = analyzer_pb2_grpc.AnalyzerStub(self._channel)

        directory = str(self.pack_dir)
        try:
            client.Handshake(
                analyzer_pb2.AnalyzerHandshakeRequest(
                    engine_address=f"127.0.0.1:{engine_port}",
                    root_directory=directory,
                    program_directory=directory,
                )
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:  # older packs: fine, as for the CLI
                raise
        client.GetPluginInfo(empty_pb2.Empty())
        configure_stack = analyzer_pb2.AnalyzerStackConfigureRequest(
            stack=self.stack,
            project=self.project,
            organization="organization",
            dry_run=True,
            config=to_struct(self.stack_config),
        )
        client.ConfigureStack(configure_stack)
        self.info = client.GetAnalyzerInfo(empty_pb2.Empty())
        self.config = reconcile_config(self.info, self.policy_config)
        client.Configure(
            analyzer_pb2.ConfigureAnalyzerRequest(
                policyConfig={
                    name: _policy_config_message(entry) for name, entry in self.config.items()
                }
            )
        )

    def _read_port(self) -> int:
        """The first stdout line is the port; a pack that dies first is reported with its stderr."""
        assert self._process is not None and self._process.stdout is not None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self._process.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(START_TIMEOUT_S)
        text = line[0].strip() if line else ""
        if not text.isdigit():
            self._process.kill()
            _, stderr = self._process.communicate(timeout=10)
            detail = (stderr or text or "no output").strip().splitlines()[-20:]
            raise PolicyPackError(
                f"policy pack {self.pack_dir} failed to start:\n" + "\n".join(detail)
            )
        # From here on the pack's prints are diagnostics, as the CLI shows them; draining the
        # pipes also keeps a chatty pack from blocking on a full one.
        for stream in (self._process.stdout, self._process.stderr):
            drainer = threading.Thread(target=self._drain, args=(stream,), daemon=True)
            drainer.start()
            self._drainers.append(drainer)
        return int(text)

    def _drain(self, stream) -> None:
        for line in stream:
            self._logs.append(line.rstrip())

    def analyze(self, resources: Iterable[PreviewResource]) -> PolicyReport:
        resources = list(resources)
        assert self.info is not None, "use PolicyAnalyzer as a context manager"
        by_urn = {r.urn: r for r in resources}
        described = [(r, self._described(r, by_urn)) for r in resources]
        diagnostics = []
        for resource, fields in described:
            response = self._client.Analyze(analyzer_pb2.AnalyzeRequest(**fields))
            # As the CLI does: a resource check's finding belongs to the resource it checked.
            diagnostics += [_attributed(d, resource.urn) for d in response.diagnostics]
        stack = analyzer_pb2.AnalyzeStackRequest(
            resources=[
                analyzer_pb2.AnalyzerResource(
                    **fields, parent=r.parent or "", dependencies=r.dependencies
                )
                for r, fields in described
            ]
        )
        diagnostics += self._client.AnalyzeStack(stack).diagnostics
        return PolicyReport(
            pack=self.info.name,
            version=str(self.project_file.get("version") or self.info.version),
            violations=[
                Violation(
                    policy=d.policyName,
                    level=LEVELS[d.enforcementLevel],
                    message=d.message,
                    urn=d.urn,
                )
                for d in diagnostics
            ],
            logs=self._logs,
            config=self.config,
            guidance={p.name: (p.remediation_steps, p.url) for p in self.info.policies},
        )

    def _described(
        self, resource: PreviewResource, by_urn: Mapping[str, PreviewResource]
    ) -> dict[str, Any]:
        """The fields the engine sends of a resource in both Analyze and AnalyzeStack."""
        return {
            "urn": resource.urn,
            "type": resource.type,
            "name": resource.name,
            "properties": to_struct(resource.inputs),
            "options": analyzer_pb2.AnalyzerResourceOptions(parent=resource.parent or ""),
            "provider": self._provider(resource, by_urn),
        }

    def _provider(
        self, resource: PreviewResource, by_urn: Mapping[str, PreviewResource]
    ) -> analyzer_pb2.AnalyzerProviderResource | None:
        """The resource's provider as the engine describes it: an explicit provider resource, or
        the package's default provider, whose inputs are the stack's `<package>:*` config."""
        if not resource.custom or resource.type.startswith("pulumi:"):
            return None
        package = resource.type.split(":")[0]
        if resource.provider:
            urn = resource.provider.rsplit("::", 1)[0]
            explicit = by_urn.get(urn)
            if explicit is not None:
                return analyzer_pb2.AnalyzerProviderResource(
                    urn=explicit.urn,
                    type=explicit.type,
                    name=explicit.name,
                    properties=to_struct(explicit.inputs),
                )
        prefix = f"{package}:"
        inputs = {
            key[len(prefix) :]: value
            for key, value in self.stack_config.items()
            if key.startswith(prefix)
        }
        return analyzer_pb2.AnalyzerProviderResource(
            urn=f"urn:pulumi:{self.stack}::{self.project}::pulumi:providers:{package}::default",
            type=f"pulumi:providers:{package}",
            name="default",
            properties=to_struct(inputs),
        )

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for drainer in self._drainers:
            drainer.join(timeout=10)
        if self._engine_server is not None:
            self._engine_server.stop(None)


def _policy_config_message(entry: Mapping[str, Any]) -> analyzer_pb2.PolicyConfig:
    properties = {k: v for k, v in entry.items() if k != "enforcementLevel"}
    return analyzer_pb2.PolicyConfig(
        enforcementLevel=LEVEL_VALUES[entry["enforcementLevel"]],
        properties=to_struct(properties),
    )


def _attributed(
    diagnostic: analyzer_pb2.AnalyzeDiagnostic, urn: str
) -> analyzer_pb2.AnalyzeDiagnostic:
    if not diagnostic.urn:
        diagnostic.urn = urn
    return diagnostic


def check_preview(
    pack_dir: Path,
    program_dir: Path,
    stack: str,
    resources: Iterable[PreviewResource],
    policy_config: Mapping[str, Mapping[str, Any]] | None = None,
) -> PolicyReport:
    """The pack's verdict on a previewed stack, with the stack's config as the CLI would pass it
    and the policy config of `read_policy_config`."""
    from components.config.files import load_project, program_config

    project = load_project(program_dir)
    config, _ = program_config(program_dir, project, stack)
    with PolicyAnalyzer(
        pack_dir,
        project=project["name"],
        stack=stack,
        stack_config=config,
        policy_config=policy_config,
    ) as analyzer:
        return analyzer.analyze(resources)


def format_report(report: PolicyReport) -> str:
    """Violations grouped by level, mandatory first, as `pulumi preview` lists them, then the
    waived ones."""
    lines = [f"Policies: {report.pack}@v{report.version}"]
    for level, found in report.grouped().items():
        if not found:
            continue
        lines += ["", f"  {level} ({len(found)}):"]
        for violation in sorted(found, key=lambda v: (v.policy, v.urn)):
            where = "::".join(violation.urn.split("::")[-2:]) if violation.urn else "stack"
            detail = violation.message.splitlines()[-1]
            lines.append(f"    [{level}] {violation.policy} ({where})")
            lines.append(f"        {detail}")
            fix, url = report.guidance.get(violation.policy, ("", ""))
            lines += [
                f"        {label}: {text}" for label, text in (("fix", fix), ("see", url)) if text
            ]
    if not report.violations:
        lines.append("  no violations")
    if report.logs:
        lines += ["", "  pack output:", *(f"    {line}" for line in report.logs)]
    return "\n".join(lines)
