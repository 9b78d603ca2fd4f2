"""`spotctl job`: a team's training Job from its stack, ready for `kubectl create -f -`.

From a few flags (team, GPU class, nodes, image by digest, command, state size, step time) it
writes the Job the stack's own templates would hold for that run: the team's Kueue queue and
priority class, the class's spot-first placement, the grace period of the stack's notice, the
podFailurePolicy that ignores preemptions, the checkpoint URI under the team's prefix, and the
planner's checkpoint interval for the run (CHECKPOINT_INTERVAL_S, CHECKPOINT_EVERY_STEPS in the
container's environment, for the command to save by). On several nodes, where the plan finds
that the runtime's memory tier pays (or with `--memory-tier on`), it saves between durable saves
at the two tiers' intervals (SPOTSAFE_MEMORY_EVERY_STEPS too), its copies in the pod's /dev/shm,
sized with the pod's memory to hold them. The Job is checked as `spotctl render --validate`
checks the stack before it is printed; every refusal is one line naming its flag.

The package: `request` (the flags against the stack's config), `memory` (the memory tier's room
in the pods), `plan` (the node the pods are packed on, and the planner's intervals), `manifest`
(the Job and its checks against the stack's preview).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from spotctl.options import ProgramOption, StackOption, choices
from spotctl.outputs import OutputError, fail, output_file

if TYPE_CHECKING:
    from spotctl.job.memory import Room
    from spotctl.job.request import Placed
    from spotctl.plan import Planned


MemoryTier = choices("MemoryTier", ("auto", "on", "off"))


def _refuse(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def command(
    stack: StackOption,
    name: Annotated[str, typer.Option(help="The Job's name; also the run's, under the team.")],
    image: Annotated[
        str, typer.Option(help="Training image by digest: REPOSITORY@sha256:<64 hex>.")
    ],
    state_gib: Annotated[
        float,
        typer.Option(help="Checkpointed state in GiB (model, optimizer, ...), over all nodes."),
    ],
    step_s: Annotated[float, typer.Option(help="Seconds per training step.")],
    team: Annotated[
        str | None, typer.Option(help="Team whose queue, namespace and bucket prefix it uses.")
    ] = None,
    gpu_class: Annotated[
        str | None,
        typer.Option("--class", help="GPU class (default: the team's template class)."),
    ] = None,
    nodes: Annotated[
        int, typer.Option(help="Nodes; several run as one gang of spotsafe-run agents.")
    ] = 1,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs per node (default: what every type of the class has).")
    ] = None,
    command_line: Annotated[
        str | None,
        typer.Option("--command", help="Training command, one string (or give it after --)."),
    ] = None,
    job_hours: Annotated[
        float, typer.Option(help="Hours of training the run needs; caps the interval.")
    ] = 24.0,
    bucket: Annotated[
        str | None,
        typer.Option(
            help="The deployed checkpoint bucket (`pulumi stack output checkpoint_bucket`), "
            "unless the stack names it."
        ),
    ] = None,
    memory_tier: Annotated[
        MemoryTier,
        typer.Option(
            help="On 2+ nodes, also save in peers' memory between durable saves (the runtime's "
            "memory tier): where the plan finds it pays (auto), wherever it applies (on), or "
            "never (off)."
        ),
    ] = "auto",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the YAML here, not to stdout.")
    ] = None,
    program: ProgramOption = None,
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="COMMAND", help="The training command, after --.", show_default=False
        ),
    ] = None,
) -> None:
    """Write a team's training Job for the stack, validated, for `kubectl create -f -`."""
    for option, value in (("--state-gib", state_gib), ("--step-s", step_s)):
        if not value > 0:
            raise _refuse(f"{option} must be a positive number, not {value:g}")
    if not job_hours > 0:
        raise _refuse(f"--job-hours must be a positive number, not {job_hours:g}")
    if command_line is not None and args:
        raise _refuse("--command: give the command once, as --command '...' or after --")
    try:
        words = tuple(shlex.split(command_line) if command_line is not None else args or ())
    except ValueError as exc:
        raise _refuse(f"--command {command_line!r}: {exc}") from None
    try:
        if output is not None:
            output_file(output, "--output")
    except OutputError as exc:
        raise fail(exc) from None

    import yaml

    from components.config.files import ProgramInputError, find_program
    from components.config.loading import read_stack
    from spotctl.job.plan import plan_run
    from spotctl.job.request import JobError, Request, final_save_fits, place
    from spotctl.plan import INPUT_ERRORS

    request = Request(name, image, words, nodes, team, gpu_class, gpus_per_node, bucket)
    try:
        program = program or find_program(Path.cwd())
        settings = read_stack(program, stack, "--stack")
        placed = place(settings, stack, request)
        plan, tier = plan_run(
            settings, stack, program, placed, nodes, state_gib, step_s, job_hours, memory_tier
        )
        final_save_fits(plan, state_gib, nodes)
    except (ProgramInputError, JobError, *INPUT_ERRORS) as exc:
        raise _refuse(str(exc)) from None

    from spotctl.progress import Progress

    with Progress("job") as progress:
        progress.update(stack, "starting the engine (Pulumi and the providers load first)")
        from spotctl.job.manifest import problems, write_job
        from spotctl.preview.resources import PreviewError, preview_program
        from spotctl.render.manifests import render

        try:
            resources = preview_program(program, stack, on_registered=progress.registrations(stack))
        except PreviewError as exc:
            progress.close()
            raise _refuse(f"--stack {stack}: {exc}") from None
        progress.update(stack, "writing and validating the Job")
        rendered = render(resources)
        try:
            written = write_job(
                settings,
                resources,
                rendered,
                request,
                placed,
                plan,
                None if isinstance(tier, str) else tier,
            )
        except JobError as exc:
            progress.close()
            raise _refuse(str(exc)) from None
        found = problems(rendered, written)
    for problem in found:
        typer.echo(f"invalid: {problem}", err=True)
    if found:
        raise typer.Exit(4)
    text = yaml.safe_dump(written.job, sort_keys=False)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
    typer.echo(summary(written.job, placed, plan, tier), err=True)


def summary(job: dict, placed: Placed, plan: Planned, tier: Room | str) -> str:
    """One line: the Job, its intervals and what its memory tier takes, or why it has none."""
    from components.k8s.jobs import SHM_GIB

    nodes = job["spec"].get("completions", 1)
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    kind, on = ("indexed Job", f"{nodes} nodes") if nodes > 1 else ("Job", "1 node")
    line = (
        f"{kind} {placed.team.namespace}/{job['metadata']['name']}: {on} of "
        f"{placed.gpus_per_node} {placed.gpu_class.name} GPUs; checkpoint every "
        f"{env['CHECKPOINT_EVERY_STEPS']} steps ({env['CHECKPOINT_INTERVAL_S']} s, planned for "
        f"the {plan.inputs['provider_data']['band']} interruption band)"
    )
    if not isinstance(tier, str):
        line += (
            f", in peers' memory every {env['SPOTSAFE_MEMORY_EVERY_STEPS']} steps (/dev/shm "
            f"{tier.shelf_gib + SHM_GIB} GiB, memory {tier.pod_memory_gib} GiB a pod)"
        )
    elif nodes > 1:
        line += f"; no memory tier: {tier}"
    return line + "; valid under the stack's schemas, admission policies and nodes"
