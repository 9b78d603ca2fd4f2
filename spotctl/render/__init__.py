"""`spotctl render`: the Kubernetes objects a stack would apply, as YAML for kubectl or review.

Built on the offline preview: a `kubernetes:*` resource's inputs are the object itself. Helm
releases are written as their pinned chart, version, repository and values (for `helm upgrade
--install`), and the training Job templates held in each team's template ConfigMap are written
out as files of their own. `--validate` checks built-in kinds with kubernetes-validate (strict),
custom resources against the CRDs found under each `--crds` directory (defaults applied and CEL
rules evaluated as the API server does), that the stack's own admission policies admit every
object it puts in its namespaces (the Job templates among them) without a warning, and that
every extended resource a pod requests is advertised by a device plugin on every node the pod
can run on.

Layout of OUT:
  manifests/NNN-<kind>-<namespace>-<name>.yaml   numbered in apply order
  helm/<release>/release.yaml, helm/<release>/values.yaml
  templates/<namespace>/<template>.yaml
A rerun replaces the files of the previous render (OUT/.spotctl-files lists them) and nothing
else; an OUT that holds files of someone else is refused unless --force (`spotctl.outputs`).

The package: `manifests` (the objects and their files, validation), `crd_rules` (the CRDs'
defaults and CEL rules), `admission` (ValidatingAdmissionPolicies as the API server applies
them), `scheduling` (whether the stack's nodes serve what its pods request).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from components.config.files import (
    ProgramInputError,
    find_program,
    load_project,
    program_config,
)
from components.versions import KUBERNETES_VERSION
from spotctl.options import ProgramOption, StackOption
from spotctl.outputs import ForceOption, OutputDirectory, OutputError, fail
from spotctl.progress import Progress


def command(
    stack: StackOption,
    out: Annotated[Path, typer.Option("--out", help="Directory to write the YAML into.")],
    program: ProgramOption = None,
    check: Annotated[
        bool, typer.Option("--validate", help="Validate every object; exit 4 on a problem.")
    ] = False,
    kubernetes_version: Annotated[
        str, typer.Option("--kubernetes-version", help="Kubernetes version to validate for.")
    ] = KUBERNETES_VERSION,
    crds: Annotated[
        list[Path] | None,
        typer.Option("--crds", help="Directory of CRD YAML to validate custom resources with."),
    ] = None,
    force: ForceOption = False,
) -> None:
    """Write every Kubernetes object the stack would apply, plus its training Job templates."""
    # Every input and output is checked before the preview's minute of work.
    missing = [str(d) for d in crds or [] if not d.is_dir()]
    if check and missing:
        typer.echo(f"error: --crds directory not found: {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    if check:
        from spotctl.render.manifests import major_minor, validated_versions

        if major_minor(kubernetes_version) not in validated_versions():
            typer.echo(
                f"error: --kubernetes-version {kubernetes_version}: no schemas for it (known: "
                f"{', '.join(validated_versions())})",
                err=True,
            )
            raise typer.Exit(2)
    try:
        target = OutputDirectory(out, "--out", force)
        program = program or find_program(Path.cwd())
        program_config(program, load_project(program), stack)  # its YAML, before the engine
    except OutputError as exc:
        raise fail(exc) from None
    except ProgramInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    with Progress("render") as progress:
        progress.update(stack, "starting the engine (Pulumi and the providers load first)")
        from spotctl.render.manifests import RenderError, render_stack, write

        try:
            rendered = render_stack(program, stack, progress.registrations(stack))
        except RenderError as exc:
            progress.close()
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        progress.update(stack, f"writing {len(rendered.all_objects())} objects to {out}")
        target.clear()
        written = write(rendered, out)
        target.record(written)
    typer.echo(
        f"wrote {len(written)} files to {out}: {len(rendered.objects)} objects, "
        f"{len(rendered.releases)} Helm releases, {len(rendered.templates)} Job templates"
    )
    if not check:
        return
    from spotctl.render.manifests import admission_problems, scheduling_problems, validate

    with Progress("render") as progress:
        progress.update(
            stack,
            f"validating {len(rendered.all_objects())} objects for Kubernetes {kubernetes_version}",
        )
        try:
            problems, unvalidated = validate(rendered.all_objects(), kubernetes_version, crds or [])
            problems += admission_problems(rendered)
        except RenderError as exc:
            progress.close()
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        problems += scheduling_problems(rendered)
    for kind in unvalidated:
        typer.echo(f"not validated (no schema; pass its CRD with --crds): {kind}")
    for problem in problems:
        typer.echo(f"invalid: {problem}", err=True)
    if problems:
        raise typer.Exit(4)
    typer.echo(f"all validated objects are valid for Kubernetes {kubernetes_version}")
