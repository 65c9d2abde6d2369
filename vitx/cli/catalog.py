"""`vitx adapters` and `vitx tasks`: what transfer can use, as tables."""
from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..registry import ADAPTERS, TASKS


def _wide() -> Console:
    """Tables stay readable when piped (no terminal width): at least 150 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, 150))


def adapters(pattern: str = typer.Argument("*", help="fnmatch filter.")) -> None:
    """List the transfer adapters (use with `vitx transfer --adapter NAME(options)`)."""
    from ..adapters import DEFAULTS, ROLES

    table = Table(title="vitx adapters")
    for col in ("name", "role", "default", "description", "from"):
        table.add_column(col)
    def order(name: str) -> int:
        role = getattr(ADAPTERS.get(name).obj, "role", None)
        return ROLES.index(role) if role in ROLES else len(ROLES)

    for name in sorted(ADAPTERS.names(pattern), key=order):
        entry = ADAPTERS.get(name)
        role = getattr(entry.obj, "role", "?")
        table.add_row(name, role, "yes" if DEFAULTS.get(role) == name else "", escape(entry.description),
                      entry.source)
    table.caption = "one adapter per role (input, head, method); roles not named with --adapter take the default"
    _wide().print(table)


def tasks(pattern: str = typer.Argument("*", help="fnmatch filter, e.g. 'vtab/*'.")) -> None:
    """List the transfer tasks with their group, classes, label definition and data."""
    from ..tasks import get_task

    table = Table(title="vitx tasks")
    for col in ("name", "group", "classes", "label", "data"):
        table.add_column(col, justify="right" if col == "classes" else "left")
    for name in TASKS.names(pattern):
        task = get_task(name)
        where = ["embedded"] if task.embedded else []
        where += [f"hf:{task.hub}"] if task.hub else ["--data-dir"]
        table.add_row(name, task.group, str(task.num_classes), escape(task.label), escape(", ".join(where)))
    table.caption = "--data-dir DIR reads a local copy (hub WebDataset layout: train/*.tar, test/*.tar; or save_to_disk)"
    _wide().print(table)
