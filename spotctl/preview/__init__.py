"""`spotctl preview`: an offline plan of a stack on Pulumi's mock engine, no cloud account needed.

The package: `resources` (what a preview returns, and running one), `engine` (the mock engine,
started in its own interpreter), `aws` and `gcp` (how the mock engine answers each cloud's
provider, with the ids of `ids`), `analyzer` (a policy pack run the way the Pulumi CLI runs it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from spotctl.options import PolicyPackConfigOption, ProgramOption, StackOption
from spotctl.preview.resources import (
    PreviewError,
    PreviewResource,
    resource_tree,
    run_preview,
    waits_for,
)


def command(
    stack: StackOption,
    program: ProgramOption = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the resources as JSON here.")
    ] = None,
    policy_pack: Annotated[
        Path | None,
        typer.Option(
            "--policy-pack", help="Run this policy pack (PulumiPolicy.yaml) as the CLI does."
        ),
    ] = None,
    policy_pack_config: PolicyPackConfigOption = None,
) -> None:
    """Preview a stack offline: the resource tree a `pulumi preview` would show."""
    from components.config.files import (
        ProgramInputError,
        find_program,
        load_project,
        program_config,
    )
    from spotctl.outputs import OutputError, fail, output_file
    from spotctl.progress import Progress

    # Refused before the preview runs: an output that cannot be written, a policy pack or its
    # config that cannot be used, a program or stack that is not there.
    try:
        if json_path is not None:
            output_file(json_path, "--json")
        policy_config = _policy_inputs(policy_pack, policy_pack_config)
        program = program or find_program(Path.cwd())
        program_config(program, load_project(program), stack)  # its YAML, before the engine
    except OutputError as exc:
        raise fail(exc) from None
    except ProgramInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"Previewing stack {stack!r} of {program.resolve()}")
    with Progress("preview") as progress:
        progress.update(stack, "starting the engine (Pulumi and the providers load first)")
        try:
            previewed = run_preview(program, stack, on_registered=progress.registrations(stack))
        except PreviewError as exc:
            progress.close()
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1 if exc.crashed else 2) from None
        progress.update(stack, f"previewed, {len(previewed.resources)} resources")
    resources = previewed.resources
    typer.echo(resource_tree(resources))
    if previewed.diagnostics:
        typer.echo("\nDiagnostics:")
        for level, message in previewed.diagnostics:
            typer.echo(f"    {level}: {message}")
    # Written before the policies run: a mandatory violation must not cost the plan.
    if json_path is not None:
        keep = ("urn", "type", "name", "parent", "inputs")
        document = {
            "resources": [
                {**{k: getattr(r, k) for k in keep}, "dependencies": waits_for(r)}
                for r in resources
            ]
        }
        json_path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    if policy_pack is not None:
        check_policies(policy_pack, program, stack, resources, policy_config)


def _policy_inputs(pack: Path | None, config: Path | None) -> dict[str, dict[str, Any]]:
    """The policy config, once the pack's project file and interpreter and the config file
    are found usable; ProgramInputError names the option otherwise."""
    if pack is None and config is None:
        return {}
    from components.config.files import ProgramInputError
    from spotctl.preview.analyzer import (
        PolicyPackError,
        load_pack_project,
        pack_python,
        read_policy_config,
    )

    try:
        if pack is not None:
            pack_python(pack, load_pack_project(pack))
    except PolicyPackError as exc:
        raise ProgramInputError(f"--policy-pack {exc}") from None
    try:
        return read_policy_config(config)
    except PolicyPackError as exc:
        raise ProgramInputError(str(exc)) from None


def check_policies(
    pack: Path,
    program: Path,
    stack: str,
    resources: list[PreviewResource],
    config: Mapping[str, Mapping[str, Any]],
) -> None:
    """Prints the pack's violations; exit status 3 on a mandatory one, 2 if the pack cannot run."""
    from spotctl.preview.analyzer import PolicyPackError, check_preview, format_report
    from spotctl.progress import Progress

    try:
        with Progress("preview") as progress:
            progress.update("policies", f"running the pack {pack} on {len(resources)} resources")
            report = check_preview(pack, program, stack, resources, config)
    except PolicyPackError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo("")
    typer.echo(format_report(report))
    if report.mandatory:
        raise typer.Exit(3)
