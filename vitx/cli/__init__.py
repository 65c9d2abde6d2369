"""The `vitx` command line. User errors print one line and exit 2; bugs keep their traceback."""
from __future__ import annotations

import sys

import typer

from .. import __version__
from ..errors import VitxError
from .catalog import adapters, tasks
from .evaluate import app as eval_app
from .models import models
from .objectives import objectives
from .pretrain import pretrain
from .transfer import transfer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Pre-train Vision Transformers and transfer them to new tasks.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vitx {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """vitx: the ViT paper as a toolkit: backbones, pre-training objectives, transfer, on Accelerate."""


app.command("pretrain")(pretrain)
app.command("models")(models)
app.command("objectives")(objectives)
app.command("transfer")(transfer)
app.command("adapters")(adapters)
app.command("tasks")(tasks)
app.add_typer(eval_app, name="eval")


def main() -> None:
    try:
        app()
    except VitxError as exc:
        print(f"error: {exc.user_message()}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted; the last checkpoint is intact: continue with --resume", file=sys.stderr)
        sys.exit(130)
