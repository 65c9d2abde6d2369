"""How vitx prints for people: the console a command's lines go to, and one line said as written."""
from __future__ import annotations

from rich.console import Console


def say(console: Console, line: str) -> None:
    """One line for people, as written: never re-wrapped (a path or a command stays one piece to copy) and never
    read as rich markup (a user's `[...]` in a path or a name is printed, not swallowed)."""
    console.print(line, soft_wrap=True, markup=False)


def make_console(quiet: bool = False, log_format: str = "auto") -> Console:
    """A run's report (its header, progress, results) goes to stdout, so `vitx pretrain > log.txt` or `| tee` keep
    it; errors go to stderr (the CLI prints them itself). In a file or pipe the console is wide enough that a line
    is not cut. `quiet`: it prints nothing. `log_format` json: stdout is for the JSON progress records alone (one
    object per line, what `| jq` reads), so the lines for people (header, notes, results, tables) go to stderr."""
    stderr = log_format == "json"
    console = Console(quiet=quiet, stderr=stderr)
    return console if console.is_terminal else Console(quiet=quiet, stderr=stderr, width=max(console.width, 132))


__all__ = ["make_console", "say"]
