"""What every process of one transfer knows alike: its tasks and their folders, the work list, which items are
done (their markers on disk), and the point each final run trains: its own (--no-sweep), its task's best sweep
point (--select task) or the suite's (--select suite: the ViT paper's, Appendix B.1.1), once the sweep points
it is chosen from are all on disk."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from ..safe_io import read_json_object
from ..errors import VitxError
from ..tasks import Task, TaskSplits
from .config import TransferConfig
from .folders import write_json
from .items import CLOSED, FINAL, SWEEP, Item
from .report import print_selection

SELECTIONS = {"fixed": "fixed (--no-sweep)", "task": "task", "suite": "suite"}  # result.json's `selection`


def choose_for_suite(sweeps: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The paper's selection: the (lr, steps) with the best mean val top-1 over the tasks (ties: the first in
    sweep order). Returns the choice and the table it was made from."""
    table = [{"lr": points[0]["lr"], "steps": points[0]["steps"],
              "mean_val_top1": statistics.fmean(p["val_top1"] for p in points),
              "val_top1": {task: p["val_top1"] for task, p in zip(sweeps, points)}} for points in zip(*sweeps.values())]
    best = max(table, key=lambda row: row["mean_val_top1"])
    return {"select": "suite", "lr": best["lr"], "steps": best["steps"], "mean_val_top1": best["mean_val_top1"],
            "tasks": list(sweeps), "table": table}


@dataclass
class Suite:
    """A transfer's tasks (`tasks`: as selected; `runnable`: those with data), each one's folder, the work list
    and the selection `mode` (items.selection_mode). `given`: a point chosen elsewhere for every final run."""

    cfg: TransferConfig
    tasks: list[Task]
    runnable: list[Task]
    splits: dict[str, TaskSplits]
    folders: dict[str, Path]
    mode: str
    items: list[Item]
    skipped: list[str] = field(default_factory=list)
    given: dict[str, Any] | None = None
    settled: dict[str, Any] | None = None  # the suite's selection, once made (and written) by this process

    @property
    def output(self) -> Path:
        return Path(self.cfg.output_dir)

    def task(self, name: str) -> Task:
        return next(t for t in self.runnable if t.name == name)

    def of_task(self, name: str, kind: str | None = None) -> list[Item]:
        return [i for i in self.items if i.task == name and kind in (None, i.kind)]

    def done(self, item: Item) -> bool:
        """Whether the item's marker is on disk (a task's result.json, written by an older vitx or assembled,
        stands for all its items)."""
        if read_json_object(item.marker) is not None:
            return True
        return item.kind != CLOSED and (self.folders[item.task] / "result.json").is_file()

    def points(self, name: str) -> list[dict[str, Any]] | None:
        """The task's sweep in grid order, when every point is on disk (its result's, once it has one)."""
        result = read_json_object(self.folders[name] / "result.json")
        if result is not None and result.get("sweep"):
            return result["sweep"]
        found = [read_json_object(i.marker) for i in self.of_task(name, SWEEP)]
        return None if any(p is None for p in found) else found  # type: ignore[return-value]

    def counted(self) -> list[str]:
        """The tasks the suite's selection is made on: those its means count (a synthetic task is left out of
        both unless --allow-synthetic), or all when none is."""
        return [t.name for t in self.runnable if self.cfg.allow_synthetic or not self.splits[t.name].synthetic] or \
            [t.name for t in self.runnable]

    def needs(self, item: Item) -> list[Item]:
        """The sweep points a final run's choice waits for that are not on disk yet."""
        if item.kind != FINAL or self.given is not None or self.mode not in ("task", "suite"):
            return []
        names = self.counted() if self.mode == "suite" else [item.task]
        return [i for name in names for i in self.of_task(name, SWEEP) if not self.done(i)]

    def choice(self, name: str, console: Console) -> dict[str, Any] | None:
        """{lr, steps, selection} for the task's final runs; None while the sweep it is chosen from is not all on
        disk."""
        if self.given is not None:
            return {"lr": self.given["lr"], "steps": self.given["steps"], "selection": "suite"}
        if self.mode == "fixed":
            return {"lr": self.cfg.lr, "steps": self.cfg.steps, "selection": SELECTIONS["fixed"]}
        if self.mode == "task":
            points = self.points(name)
            if points is None:
                return None
            best = max(points, key=lambda p: p["val_top1"])
            return {"lr": best["lr"], "steps": best["steps"], "selection": SELECTIONS["task"]}
        chosen = self.settle(console)  # (asked by the main process only: schedule.py's next_step)
        return None if chosen is None else {"lr": chosen["lr"], "steps": chosen["steps"], "selection": "suite"}

    def settle(self, console: Console, main: bool = True) -> dict[str, Any] | None:
        """--select suite: the choice from every counted task's sweep, once all are on disk; checked against
        selection.json (a resumed transfer must choose what it chose), written there and printed, once per
        process."""
        if self.settled is not None or self.mode != "suite":
            return self.settled
        sweeps = {name: self.points(name) for name in self.counted()}
        if any(points is None for points in sweeps.values()):
            return None
        chosen = choose_for_suite(sweeps)  # type: ignore[arg-type]
        before = read_json_object(self.output / "selection.json")
        if before is not None and (before["lr"], before["steps"], before["tasks"]) != \
                (chosen["lr"], chosen["steps"], chosen["tasks"]):
            raise VitxError(f"{self.output} chose lr {before['lr']:g} × {before['steps']} on "
                            f"{', '.join(before['tasks'])}; these tasks would choose lr {chosen['lr']:g} × "
                            f"{chosen['steps']}: resume with the same tasks, or choose another --output-dir")
        if main:
            write_json(self.output / "selection.json", chosen)
            print_selection(chosen, console)
        self.settled = chosen
        return chosen


__all__ = ["SELECTIONS", "Suite", "choose_for_suite"]
