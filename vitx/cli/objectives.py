"""`vitx objectives`: the registered pre-training objectives."""
from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..registry import OBJECTIVES


def objectives(pattern: str = typer.Argument("*", help="fnmatch filter.")) -> None:
    """List the pre-training objectives (use with `vitx pretrain --objective NAME(options)`)."""
    import vitx.objectives  # noqa: F401  (registers the built-in objectives)

    table = Table(title="vitx objectives")
    for col in ("name", "labels", "description", "from"):
        table.add_column(col)
    for name in OBJECTIVES.names(pattern):
        entry = OBJECTIVES.get(name)
        table.add_row(name, "yes" if getattr(entry.obj, "needs_labels", False) else "no", escape(entry.description),
                      entry.source)
    Console().print(table)
