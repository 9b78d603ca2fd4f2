"""spotctl entry point. Each subcommand lives in its own module; heavy imports stay inside them."""

import typer

from spotctl import drill, plan, preflight, preview, render, review

app = typer.Typer(
    help="Operate the spot training blueprint: preview, preflight, render, drill, plan, review.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Operate the spot training blueprint."""


app.command("preview")(preview.command)
app.command("preflight")(preflight.command)
app.command("render")(render.command)
app.command("drill")(drill.command)
app.command("plan")(plan.command)
app.command("review")(review.command)
