"""Transfer results for people (a rich table with group means) and tools (summary.json)."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
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
    compare = summary.get("compare") or {}
    for col in ("task", "group", "source", "classes", "shots", "chosen lr", "steps", "val", "test top-1",
                *compare, "time"):
        table.add_column(col, justify="left" if col in ("task", "group", "source") else "right")

    def published(values: list[float | None]) -> list[str]:
        return [f"{v:.1%}" if v is not None else "-" for v in values]
    for r in results:
        chosen = r.get("chosen") or {}
        best = next((p for p in r.get("sweep") or [] if (p["lr"], p["steps"]) == (chosen.get("lr"), chosen.get("steps"))),
                    None)  # the chosen point's validation score (with --select suite, not always the task's best)
        table.add_row(escape(r["task"]), r.get("group", ""), r.get("source", ""), str(r.get("num_classes", "")),
                      str(r.get("shots", "")),
                      f"{chosen['lr']:g}" if chosen else "closed form", str(chosen.get("steps", "-")),
                      f"{best['val_top1']:.1%}" if best else "-", _top1(r["test_top1"], r.get("test_top1_std")),
                      *published([c["tasks"].get(r["task"]) for c in compare.values()]), f"{r['seconds']:.0f}s")
    if len(results) > 1 or summary.get("skipped"):
        table.add_section()
        for g, mean in summary["group_means"].items():
            table.add_row(f"mean {g}", "", "", "", "", "", "", "", _top1(mean, summary.get("group_std", {}).get(g)),
                          *published([c["group_means_same_tasks"].get(g) for c in compare.values()]),
                          f"{summary['group_counts'][g]} task(s)")
        if summary["mean"] is not None:
            table.add_row("[bold]mean", "", "", "", "", "", "", "", "[bold]" + _top1(summary["mean"], summary.get("std")),
                          *published([c["mean_same_tasks"] for c in compare.values()]),
                          f"over {summary['counted']} of {summary['selected']}")
    notes = []
    if summary.get("skipped"):
        notes.append(f"skipped (no data): {', '.join(summary['skipped'])}")
    if summary.get("left_out"):
        notes.append(f"not in the means (synthetic data; --allow-synthetic counts them): {', '.join(summary['left_out'])}")
    selection = summary.get("selection") or {}
    if selection.get("select"):  # (a suite's choice has its point; one task of a suite's folder only the word)
        notes.append(f"selection: {selection['select']}" + (f" (lr {selection['lr']:g} × {selection['steps']} on the "
                                                            f"mean val top-1 over {len(selection['tasks'])} tasks)"
                                                            if {"lr", "steps", "tasks"} <= selection.keys() else ""))
    for name, c in compare.items():
        notes.append(f"{name}: {c['start']}, {c['method']} ({c['source']})"
                     + (f", printed mean over 19: {c['printed_mean']}" if c["printed_mean"] else "")
                     + "; its means here are over the same tasks as the run's" + _setup_note(c))
    table.caption = "; ".join(notes) or None
    console.print(table)


def _setup_note(compared: dict[str, Any]) -> str:
    """Beside a published row: where the run's settings differ from the setup behind it, or that they match it
    (and what of that setup vitx has no setting for)."""
    source = compared.get("setup_source")
    if not source:  # a row without a recorded setup
        return ""
    differs = compared.get("differs") or []
    note = (f"; this run differs from its setup ({source}): {', '.join(differs)}" if differs
            else f"; this run has its setup ({source})")
    return note + (f"; not in vitx's settings: {compared['beyond']}" if compared.get("beyond") else "")


def print_selection(choice: dict[str, Any], console: Console) -> None:
    """The suite's sweep: val top-1 per task and point, the mean row, the chosen column marked (the paper's
    selection, Appendix B.1.1)."""
    table = Table(title="sweep on train → val (val top-1); one point for every task, chosen on the mean")
    table.add_column("task")
    for row in choice["table"]:
        mark = " *" if (row["lr"], row["steps"]) == (choice["lr"], choice["steps"]) else ""
        table.add_column(f"lr {row['lr']:g} × {row['steps']}{mark}", justify="right")
    for task in choice["tasks"]:
        table.add_row(escape(task), *(f"{row['val_top1'][task]:.1%}" for row in choice["table"]))
    table.add_section()
    table.add_row("[bold]mean", *(f"[bold]{row['mean_val_top1']:.2%}" for row in choice["table"]))
    table.caption = (f"* chosen: lr {choice['lr']:g} × {choice['steps']} steps, mean val top-1 "
                     f"{choice['mean_val_top1']:.2%} over {len(choice['tasks'])} tasks")
    console.print(table)

