"""`vitx plugins`: every plugin, where it came from, and what it registered."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import plugins as plugin_state
from ..registry import KINDS


def plugins() -> None:
    """List the plugins (built-in, entry points, --plugin files and modules) and their components."""
    plugin_state.load_plugins()
    by_source: dict[str, list[str]] = {}
    for kind, reg in KINDS.items():
        for entry in reg:
            by_source.setdefault(entry.source, []).append(f"{kind[:-1]} {entry.name}")
    table = Table(title="vitx plugins")
    for col in ("plugin", "from", "status", "registered"):
        table.add_column(col)
    builtin = by_source.get("built-in", [])
    counts = {kind: sum(1 for c in builtin if c.startswith(kind[:-1] + " ")) for kind in KINDS}
    table.add_row("vitx", "built-in", "loaded", ", ".join(f"{n} {k}" for k, n in counts.items()))
    for name, origin in plugin_state.loaded.items():
        table.add_row(escape(name), escape(origin), "loaded", escape(", ".join(by_source.get(origin, [])) or "-"))
    for name, error in plugin_state.failed.items():
        table.add_row(escape(name), escape(plugin_state.origins.get(name, "")), f"[red]failed[/red]: {escape(error)}", "-")
    console = Console()
    (console if console.is_terminal else Console(width=max(console.width, 150))).print(table)
