"""The `vitx` command line. User errors print one line and exit 2; bugs keep their traceback.

Every command module imports torch, timm, datasets and matplotlib inside the command, never at the top: the
app, `--help` and the listings start in well under a second, and a plugin is imported only when its kind is.
"""
from __future__ import annotations

import errno
import sys
from typing import List

import typer

from .. import __version__
from ..errors import DISK_STATE_ERRNOS, Interrupted, VitxError, first_line
from ..invocation import recording
from ..runner.preemption import Stop, command_stops, exiting  # (start-up's handlers: vitx/__init__.py)
from ..runner.threads import wait_briefly
from ..discovery import load_env_plugins, load_plugin
from .bench import bench
from .catalog import adapters, models, objectives, plugins, tasks
from .configured import add_evaluators, eval_app, pretrain, transfer
from .export import export
from .inspect import inspect
from .plot import plot
from .predict import predict
from .report import report
from .reproduce import reproduce

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Pre-train Vision Transformers and transfer them to new tasks.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"vitx {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          plugin: List[str] = typer.Option([], "--plugin", help="Load a plugin file (.py) or module first; repeatable. "
                                           "Also VITX_PLUGINS=a.py:b.py.")) -> None:
    """vitx: the ViT paper as a toolkit: backbones, pre-training objectives, transfer, on Accelerate."""
    # --plugin is taken out of the command line by main() before parsing, wherever it stands; declared here
    # for --help. VITX_PLUGINS is read there too.


for command in (pretrain, models, objectives, transfer, adapters, tasks, plugins, inspect, reproduce, export, predict,
                plot, report, bench):  # in the order --help lists them
    app.command(command.__name__)(command)
app.add_typer(eval_app, name="eval")
add_evaluators()  # the built-in ones now (`app` is whole when imported); main() again after plugins load


WORKING = ("pretrain", "transfer", "eval", "inspect", "reproduce", "export", "predict", "plot", "report", "bench")


def _take_plugins(argv: list[str]) -> tuple[list[str], list[str]]:
    """`--plugin X` may stand anywhere (`vitx pretrain --plugin f.py ...`): pull every one out before parsing, so
    the plugin's names exist when the command's options are checked."""
    rest, plugins = [], []
    it = iter(argv)
    for arg in it:
        if arg == "--plugin":
            value = next(it, None)
            if value is None:
                raise VitxError("--plugin needs a file or module name")
            plugins.append(value)
        elif arg.startswith("--plugin="):
            plugins.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return rest, plugins


def _check_utf8(argv: list[str]) -> None:
    """Refuse an argument that is not valid UTF-8 (a path typed in another encoding reaches Python as lone
    surrogates): safetensors, JSON and the pages need UTF-8 names, and would fail only after the work."""
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise VitxError(f"the argument {ascii(arg)[1:-1]} is not valid UTF-8; vitx's files record paths and "
                            "names as UTF-8: rename it") from None


def _command_path(argv: list[str]) -> str:
    """`vitx eval knn`: the command (and subcommand) that `argv` names, as far as they are commands."""
    group, path = typer.main.get_command(app), ["vitx"]
    for token in argv:
        found = getattr(group, "commands", {}).get(token)
        if found is None:
            break
        path.append(token)
        group = found
    return " ".join(path)


def _run_app(argv: list[str]) -> int:
    """The app on `argv`, its exit status returned; a usage error (an unknown option, a missing value, a bad
    choice: click's) is one line like every other error, naming the help to read, not click's framed block."""
    import typer.core

    click = getattr(typer.core, "_click", None)  # (typer 0.29 runs on its own copy of click; earlier, on click)
    if click is None:
        import click
    no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())  # (click 8.2 on; before, it printed and exited)
    try:
        code = app(args=argv, prog_name="vitx", standalone_mode=False)
    except no_args as shown:  # `vitx` or `vitx eval` alone: the help, as before (rich printed it already)
        if shown.message:
            click.echo(shown.message, err=True)
        return 2
    except click.exceptions.UsageError as exc:
        message = " ".join(exc.format_message().split()).rstrip(".")  # (click's text may wrap)
        raise VitxError(f"{message[:1].lower()}{message[1:]} (see {_command_path(argv)} --help)") from None
    except click.exceptions.ClickException as exc:  # (click's other errors: a bad file argument, say)
        raise VitxError(" ".join(exc.format_message().split())) from None
    except typer.Abort as exc:  # click's Abort: typer raises it for an end of input (Ctrl-C it turns into 130)
        if isinstance(exc.__cause__, EOFError):
            raise VitxError(f"unexpected end of input ({first_line(exc.__cause__)})") from None
        raise Interrupted("Ctrl-C") from None
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def main(argv: list[str] | None = None) -> None:
    """The console script. `argv` (default: sys.argv[1:]) lets tests and notebooks run a command in-process;
    like the script, it ends in SystemExit with the exit status."""
    script = argv is None
    if script:  # before any plugin or command loads torch; in-process callers keep their environment
        wait_briefly()
    try:
        with command_stops() as stops:  # a stop signal or Ctrl-C is one line (runner/preemption.py: the rule for every
            # command)
            given = sys.argv[1:] if argv is None else list(argv)
            _check_utf8(given)
            argv, plugins = _take_plugins(given)
            stops.continues = ""  # run again; a command that resumes says how as it starts (`continues_with`)
            strict = bool(argv) and argv[0] in WORKING and "--help" not in argv and argv != ["eval"]  # (a listing,
            # --version or a help shows the failure as a warning)
            load_env_plugins(strict)
            for target in plugins:
                load_plugin(target, strict)
            add_evaluators()  # vitx eval NAME for every evaluator, a plugin's included
            with recording(given):  # config.json records the command line (model cards show it)
                code = _run_app(argv)
        sys.exit(code)  # (as the script ends: SystemExit with the status, 0 too)
    except (VitxError, Stop) as caught:
        exc = caught.error if isinstance(caught, Stop) else caught
        print(f"{exc.label}: {exc.user_message()}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except RuntimeError as exc:
        from ..errors import is_out_of_memory, out_of_memory

        if not is_out_of_memory(exc):  # torch's, for every device, and its CPU allocator's
            raise
        print(f"error: {out_of_memory(exc, argv[0] if argv else '')}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # a path the user gave, wherever it is first used
            name = str(exc.filename or "a path")
            print(f"error: {name[:60] + '…' if len(name) > 60 else name}: a name in this path is longer than the "
                  "filesystem allows (255 bytes a name)", file=sys.stderr)
            sys.exit(2)
        if exc.errno not in DISK_STATE_ERRNOS:  # the machine's state, whatever command
            raise
        from ..errors import cannot_write

        print(f"error: {cannot_write(exc.filename or 'a file', exc).user_message()}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # before the command started
        print("interrupted: Ctrl-C", file=sys.stderr)
        sys.exit(130)
    finally:
        from ..hub import reset

        reset()  # (in-process callers get their hub clients back as they were)
        if script:  # the console script: only the interpreter's exit is left
            exiting()
