"""spotctl entry point. Each subcommand lives in its own module; heavy imports stay inside them,
so `--help`, a bad option and the quick commands answer without loading Pulumi or torch."""

from typing import Annotated

import typer
from typer.core import TyperGroup

from spotctl import drill, job, plan, preflight, preview, render, review, status

# Click's UsageError (an unknown option, a value outside the choices, a missing option), reached
# through the public BadParameter, whichever click Typer carries.
UsageError = typer.BadParameter.__mro__[1]


class OneLineErrors(TyperGroup):
    """A usage error is one line on stderr, exit 2, like every other refusal of spotctl."""

    def invoke(self, ctx: typer.Context) -> object:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            # Typer validates values with pydantic, which prefixes its own label.
            message = exc.format_message().replace("Value error, ", "")
            where = exc.ctx.command_path if exc.ctx else ctx.command_path
            typer.echo(f"error: {message} (`{where} -h` lists the options)", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=OneLineErrors,
    help="Operate the spot training blueprint: preview, preflight, render, drill, plan, review, "
    "job, status.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help and errors: they read the same piped, and need no Markdown renderer.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"spotctl {version('spot-training-blueprint')}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Operate the spot training blueprint."""


app.command("preview")(preview.command)
app.command("preflight")(preflight.command)
app.command("render")(render.command)
app.command("drill")(drill.command)
app.command("plan")(plan.command)
app.command("review")(review.command)
app.command("job")(job.command)
app.command("status")(status.command)
