"""Transfer results for people (a rich table with group means) and tools (summary.json)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..tasks import GROUPS


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean test top-1 per group (over the tasks run) and overall (mean over tasks, VTAB's headline number)."""
    groups = {g: [r["test_top1"] for r in results if r.get("group") == g] for g in GROUPS}
    means = {g: sum(v) / len(v) for g, v in groups.items() if v}
    overall = sum(r["test_top1"] for r in results) / len(results) if results else None
    return {"group_means": means, "group_counts": {g: len(v) for g, v in groups.items()}, "mean": overall}


def print_summary(results: list[dict[str, Any]], summary: dict[str, Any], console: Console) -> None:
    table = Table(title="transfer results (test top-1)")
    for col in ("task", "group", "classes", "shots", "chosen lr", "steps", "best val", "test top-1", "time"):
        table.add_column(col, justify="left" if col in ("task", "group") else "right")
    for r in results:
        best = max(r["sweep"], key=lambda p: p["val_top1"]) if r.get("sweep") else None
        chosen = r.get("chosen") or {}
        table.add_row(r["task"], r.get("group", ""), str(r.get("num_classes", "")), str(r.get("shots", "")),
                      f"{chosen['lr']:g}" if chosen else "closed form", str(chosen.get("steps", "-")),
                      f"{best['val_top1']:.1%}" if best else "-", f"{r['test_top1']:.2%}", f"{r['seconds']:.0f}s")
    if len(results) > 1:
        table.add_section()
        for g, mean in summary["group_means"].items():
            table.add_row(f"mean {g}", "", "", "", "", "", "", f"{mean:.2%}",
                          f"{summary['group_counts'][g]} task(s)")
        table.add_row("[bold]mean", "", "", "", "", "", "", f"[bold]{summary['mean']:.2%}", f"{len(results)} task(s)")
    console.print(table)
