"""Transfer results for people (a rich table with group means) and tools (summary.json)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..tasks import GROUPS


def summarise(results: list[dict[str, Any]], selected: int | None = None, skipped: list[str] | None = None,
              allow_synthetic: bool = False) -> dict[str, Any]:
    """Mean test top-1 per group and overall (mean over tasks, VTAB's headline number), over the tasks counted:
    a VTAB task read from vitx's synthetic regeneration is left out unless `allow_synthetic`. The summary says
    over how many of the `selected` tasks each mean is, and which were skipped or left out."""
    counted = [r for r in results if allow_synthetic or not r.get("synthetic")]
    groups = {g: [r["test_top1"] for r in counted if r.get("group") == g] for g in GROUPS}
    means = {g: sum(v) / len(v) for g, v in groups.items() if v}
    overall = sum(r["test_top1"] for r in counted) / len(counted) if counted else None
    spread: dict[str, Any] = {}
    runs = {len(r.get("test_top1_per_seed", [])) for r in counted}
    if counted and len(runs) == 1 and min(runs) > 1:  # every task ran the same seeds: s.d. of each mean over them
        import statistics

        def over_seeds(rows: list[dict[str, Any]]) -> float:
            return statistics.stdev(statistics.fmean(r["test_top1_per_seed"][i] for r in rows) for i in range(min(runs)))

        spread = {"group_std": {g: over_seeds([r for r in counted if r.get("group") == g]) for g in means},
                  "std": over_seeds(counted)}
    return {"group_means": means, "group_counts": {g: len(v) for g, v in groups.items()}, "mean": overall, **spread,
            "counted": len(counted), "selected": selected if selected is not None else len(results),
            "skipped": list(skipped or []),
            "left_out": [r["task"] for r in results if r not in counted],
            "sources": {r["task"]: r.get("source", "") for r in results}}


def _top1(value: float, std: float | None) -> str:
    return f"{value:.2%}" + (f" ± {std:.2%}" if std is not None else "")


def print_summary(results: list[dict[str, Any]], summary: dict[str, Any], console: Console) -> None:
    table = Table(title="transfer results (test top-1)")
    for col in ("task", "group", "source", "classes", "shots", "chosen lr", "steps", "best val", "test top-1",
                "time"):
        table.add_column(col, justify="left" if col in ("task", "group", "source") else "right")
    for r in results:
        best = max(r["sweep"], key=lambda p: p["val_top1"]) if r.get("sweep") else None
        chosen = r.get("chosen") or {}
        table.add_row(r["task"], r.get("group", ""), r.get("source", ""), str(r.get("num_classes", "")),
                      str(r.get("shots", "")),
                      f"{chosen['lr']:g}" if chosen else "closed form", str(chosen.get("steps", "-")),
                      f"{best['val_top1']:.1%}" if best else "-", _top1(r["test_top1"], r.get("test_top1_std")),
                      f"{r['seconds']:.0f}s")
    if len(results) > 1 or summary.get("skipped"):
        table.add_section()
        for g, mean in summary["group_means"].items():
            table.add_row(f"mean {g}", "", "", "", "", "", "", "", _top1(mean, summary.get("group_std", {}).get(g)),
                          f"{summary['group_counts'][g]} task(s)")
        if summary["mean"] is not None:
            table.add_row("[bold]mean", "", "", "", "", "", "", "", "[bold]" + _top1(summary["mean"], summary.get("std")),
                          f"over {summary['counted']} of {summary['selected']}")
    notes = []
    if summary.get("skipped"):
        notes.append(f"skipped (no data): {', '.join(summary['skipped'])}")
    if summary.get("left_out"):
        notes.append(f"not in the means (synthetic data; --allow-synthetic counts them): {', '.join(summary['left_out'])}")
    table.caption = "; ".join(notes) or None
    console.print(table)
