"""Runs one Pulumi program on Pulumi's mock engine and writes what it registered as JSON.

Pulumi's runtime state is process-global, so `spotctl.preview.resources` starts this module in a
fresh interpreter per preview:
`python -m spotctl.preview.engine REQUEST_JSON OUT_JSON [--strict-deprecations] [--progress-fd N]`,
where REQUEST_JSON holds what the Pulumi CLI hands a program: its directory, its main, the project
and stack names and the stack's config ({"program_dir", "main", "project", "stack", "config",
"secret_keys"}). The config is read by the caller: this interpreter imports nothing of
`components` before the program runs, so the program imports its own copy of it.
Exit status: 0 = previewed, 2 = the program rejected its input (pulumi.RunError, e.g. a config
error), 1 = the program crashed. On 1 and 2, OUT_JSON holds {"error": message}. With
--progress-fd, each registration is a line "TYPE NAME" on that file descriptor as it happens.

The mock engine answers like a cloud would on `pulumi up`: every resource gets an id, an ARN and
a physical name in the provider's formats (`spotctl.preview.aws`, `spotctl.preview.gcp`), so no
program has to special-case a preview. And it refuses what the engine refuses: a resource or call
that names no provider where `pulumi:disable-default-providers` disables its package's default.
Inputs the program marked secret are listed by path (`secrets`) and shown as `[secret]` in the
outputs, as the engine keeps them in the state.
"""

from __future__ import annotations

import json
import logging
import os
import runpy
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any, TextIO

import pulumi
from google.protobuf import json_format
from pulumi.output import Unknown
from pulumi.runtime import mocks, rpc
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

import spotctl.preview.aws as aws
import spotctl.preview.gcp as gcp
from spotctl.preview.ids import stable_hex

# How the engine shows a secret. Not imported from `components`: this interpreter imports nothing
# of it before the program does.
SECRET = "[secret]"


def _plain(value: Any, secrets: list[list] | None = None, path: tuple = ()) -> Any:
    """Wire-format property value -> JSON: secrets unwrapped (their paths appended to `secrets`),
    resource references as URNs, values not known until deploy as the engine's unknown marker (as
    `pulumi preview --json` writes them)."""
    if isinstance(value, Unknown):
        return rpc.UNKNOWN
    if isinstance(value, dict):
        signature = value.get(rpc._special_sig_key)
        if signature == rpc._special_secret_sig:
            if secrets is not None:
                secrets.append(list(path))
            return _plain(value.get("value"), secrets, path)
        if signature == rpc._special_resource_sig:
            return value.get("urn")
        return {key: _plain(item, secrets, (*path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item, secrets, (*path, i)) for i, item in enumerate(value)]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _concealed(value: Any, secrets: list[list]) -> Any:
    """`value` with what lies at each secret path shown as the engine shows a secret: the engine
    keeps a secret input secret in the resource's outputs and state."""
    for *parents, last in filter(None, secrets):
        holder = value
        for key in parents:
            holder = _child(holder, key)
        if _child(holder, last) is not None:
            holder[last] = SECRET
    return value


def _child(holder: Any, key: str | int) -> Any:
    if isinstance(holder, dict):
        return holder.get(key)
    if isinstance(holder, list) and isinstance(key, int) and key < len(holder):
        return holder[key]
    return None


def _disabled_packages(config: dict[str, str]) -> set[str]:
    """The packages whose default provider `pulumi:disable-default-providers` disables: a list
    (`["*"]` for all), as Pulumi documents it; a lone name stands for itself."""
    text = config.get("pulumi:disable-default-providers", "[]")
    try:
        names = json.loads(text)
    except json.JSONDecodeError:
        names = text
    return {str(name) for name in names} if isinstance(names, list) else {str(names)}


class CloudMocks(mocks.Mocks):
    """Answers resource registrations and invokes with cloud-shaped values."""

    def __init__(
        self,
        region: str,
        gcp_project: str = gcp.DEFAULT_PROJECT,
        gcp_region: str = gcp.DEFAULT_REGION,
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
        resource_id = f"{args.name}-{stable_hex(args.typ + args.name, 8)}"
        if args.typ.startswith("pulumi:providers:"):
            return stable_hex(args.typ + args.name, 32), state
        if args.typ.startswith("aws:"):
            resource_id = aws.aws_outputs(args.typ, args.name, state, self.region_of(args.provider))
        if args.typ.startswith("gcp:"):
            scope = self.gcp_scope(args.provider)
            resource_id = gcp.gcp_outputs(args.typ, args.name, state, *scope)
        return resource_id, state

    def call(self, args: mocks.MockCallArgs) -> dict | tuple[dict, list]:
        answer = None
        if args.token.startswith("aws:"):
            answer = aws.aws_invoke(args.token, args.args, self.region_of(args.provider))
        if args.token.startswith("gcp:"):
            answer = gcp.gcp_invoke(args.token, args.args, *self.gcp_scope(args.provider))
        # A data source no cloud module models answers with its arguments.
        return dict(args.args) if answer is None else answer


class RecordingMonitor(mocks.MockMonitor):
    """The mock monitor, also recording what the engine learns about each registration."""

    def __init__(
        self,
        cloud_mocks: CloudMocks,
        disabled_packages: set[str],
        progress: TextIO | None = None,
    ) -> None:
        super().__init__(cloud_mocks)
        self.registrations: list[dict[str, Any]] = []
        self.disabled_packages = disabled_packages
        self.progress = progress
        # What the engine refuses, as `pulumi preview` reports it: the preview fails.
        self.errors: list[str] = []

    def _explicit_provider(self, token: str, provider: str, what: str) -> None:
        """As the engine does with `pulumi:disable-default-providers`: a resource or call of a
        disabled package that names no provider is an error."""
        package = token.split(":")[0]
        if not provider and ({package, "*"} & self.disabled_packages) and package != "pulumi":
            self.errors.append(
                f"Default provider for '{package}' disabled. {what} must use an explicit provider."
            )

    def Invoke(self, request):  # noqa: N802 (gRPC method name)
        self._explicit_provider(request.tok, request.provider, f"'{request.tok}'")
        return super().Invoke(request)

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        # As the engine does: the root stack never qualifies its children's types.
        if parent.split("::")[2:3] == ["pulumi:pulumi:Stack"]:
            parent = ""
        return super().make_urn(parent, type_, name)

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.custom and not request.type.startswith("pulumi:providers:"):
            self._explicit_provider(request.type, request.provider, f"'{response.urn}'")
        properties = json_format.MessageToDict(request.object)
        if request.type.startswith("pulumi:providers:"):
            region = properties.get("region")
            self.mocks.provider_regions[f"{response.urn}::{response.id}"] = (
                region or self.mocks.default_region
            )
            if request.type == "pulumi:providers:gcp":
                project, default_region = self.mocks.gcp_default
                self.mocks.gcp_providers[f"{response.urn}::{response.id}"] = (
                    properties.get("project") or project,
                    region or default_region,
                )
        secrets: list[list] = []
        inputs = _plain(properties, secrets)
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
                "outputs": _concealed(_plain(registered.state), secrets) if registered else {},
                "secrets": secrets,
                "dependencies": list(request.dependencies),
                "provider": request.provider or None,
                "ignore_changes": list(request.ignoreChanges),
                "error_hooks": list(request.hooks.on_error),
            }
        )
        if self.progress is not None:
            self.progress.write(f"{request.type} {request.name}\n")
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


def run(
    request: dict[str, Any], diagnostics: Diagnostics, progress: TextIO | None = None
) -> RecordingMonitor:
    config, main = request["config"], Path(request["main"])
    os.chdir(request["program_dir"])
    sys.path.insert(0, str(main if main.is_dir() else main.parent))
    pulumi.runtime.set_all_config(config, request["secret_keys"])
    logger = logging.getLogger("spotctl.preview.engine")
    logger.propagate = False
    logger.addHandler(diagnostics)
    monitor = RecordingMonitor(
        CloudMocks(
            config.get("aws:region", aws.DEFAULT_REGION),
            gcp_project=config.get("gcp:project", gcp.DEFAULT_PROJECT),
            gcp_region=config.get("gcp:region", gcp.DEFAULT_REGION),
        ),
        _disabled_packages(config),
        progress,
    )
    pulumi.runtime.set_mocks(
        monitor.mocks,
        project=request["project"],
        stack=request["stack"],
        preview=True,
        logger=logger,
        monitor=monitor,
    )
    _sync_await(run_pulumi_func(lambda: runpy.run_path(str(main), run_name="__main__")))
    return monitor


def main(argv: list[str]) -> int:
    request, out = json.loads(Path(argv[0]).read_text()), Path(argv[1]).resolve()
    strict = "--strict-deprecations" in argv[2:]
    if strict:
        strict_deprecations()
    progress = None
    if "--progress-fd" in argv[2:]:
        fd = int(argv[argv.index("--progress-fd") + 1])
        progress = open(fd, "w", buffering=1)  # noqa: SIM115 - open while the program runs
    diagnostics = Diagnostics()
    refused: list[str] = []
    try:
        monitor = run(request, diagnostics, progress)
        result, status, refused = {"resources": monitor.registrations}, 0, monitor.errors
    except pulumi.RunError as exc:
        result, status = {"error": str(exc)}, 2
    except DeprecationWarning as exc:  # raised only in strict mode
        result, status = {"error": f"uses deprecated pulumi-aws API: {exc}"}, 2
    except Exception:  # noqa: BLE001 - a crashing program is reported, with its traceback
        result, status = {"error": traceback.format_exc()}, 1
    # As `pulumi preview` does: an error logged by the program fails the preview.
    failures = refused + [m for level, m in diagnostics.messages if level in ("error", "critical")]
    if strict:
        failures += [m for _, m in diagnostics.messages if "deprecated" in m.lower()]
    if failures and status == 0:
        result, status = {"error": "\n".join(failures)}, 1
    result["diagnostics"] = diagnostics.messages
    out.write_text(json.dumps(result))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
