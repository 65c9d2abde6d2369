"""One work item run in this process: a sweep point, one seed's final run, a closed-form fit. Each writes only
its own folder and, last, the marker that says it is done (point.json, final.json, the task's result.json)."""
from __future__ import annotations

import shutil
import time
from dataclasses import replace
from typing import Any, Callable

from rich.console import Console

from .. import __version__
from ..console import say
from ..safe_io import read_json_object
from ..data.draws import classes_unseen, describe_test
from ..runs.rundir import WEIGHTS
from ..tasks import Task, TaskSplits
from ..tasks.custom import describe_record
from .config import TransferConfig, describe_origins, protocol_origins, result_settings
from .finetune import Prepared, closed_form, model_summary, prepare, train_run
from .folders import forget_task, point_dir, record_task, write_json
from .items import CLOSED, FINAL, SWEEP, Item


def open_task_run(cfg: TransferConfig, task: Task, splits: TaskSplits | None,
                  console: Console) -> tuple[Prepared, dict[str, Any]]:
    """The task's prepared splits and start, its header lines, and the settings every file of its result carries."""
    prep = prepare(cfg, task, splits)
    say(console, f"{task.name}: {len(prep.train)} train + {len(prep.val)} val images, test {describe_test(prep.test, cfg.test_samples)} "
                 f"({prep.splits.origin}) at {prep.preprocess.image_size}px | from {cfg.start} | "
                 f"adapters {', '.join(a.describe() for a in prep.adapters)}")
    unseen = classes_unseen(prep.train, task.num_classes)
    if unseen:  # (a data task's draw is refused for it: custom.py; a registered task's N-shot split is the protocol)
        say(console, f"warning: {task.name}: {len(unseen)} of {task.num_classes} classes have no image among the "
                     f"{len(prep.train)} training images of --shots {cfg.shots}: the classifier never predicts them (more "
                     "--shots gives them some)")
    pre = prep.preprocess
    say(console, f"{task.name}: input mean {tuple(round(v, 4) for v in pre.mean)}, std {tuple(round(v, 4) for v in pre.std)}, "
                 f"{pre.interpolation} ({prep.input_from})")
    counts, depth = model_summary(prep, max(1, cfg.batch_size // cfg.grad_accum))  # (one process's at most)
    settings = {"task": task.name, **result_settings(cfg), "vitx_version": __version__,
                "source": prep.splits.source, "synthetic": prep.splits.synthetic,
                "input": {"mean": list(prep.preprocess.mean), "std": list(prep.preprocess.std),
                          "interpolation": prep.preprocess.interpolation, "from": prep.input_from},
                "parameters": counts,  # what the method trains, of the whole model
                **test_record(prep.test, cfg.seed),  # the same images as `vitx eval --test-samples` with that seed
                "protocol_settings": protocol_origins(cfg)}  # the settings --protocol filled, and from where
    if settings["protocol_settings"]:
        say(console, f"{task.name}: --protocol {cfg.protocol}: {describe_origins(settings['protocol_settings'])}")
    say(console, f"{task.name}: trains {counts['trainable']:,} of {counts['total']:,} parameters")
    if depth:
        say(console, f"{task.name}: {depth}")
    record = prep.splits.record
    if record is not None:  # how the splits were made: a data task's draw, a VTAB task's definition
        shown = describe_record(record) if task.data is not None else f"splits {record['definition']}"
        say(console, f"{task.name}: labels {task.label}; {shown}")
        settings["splits"] = record
    return prep, settings


def test_record(test: Any, seed: int) -> dict[str, Any]:
    """How the test images were chosen, for a result's file: the whole split, or `--test-samples`' draw (its
    seed and the split's size): the same images as `vitx eval --test-samples` with that seed."""
    whole = getattr(test, "drawn_from", None)
    return {"test_draw": None if whole is None else {"rule": "seeded, class-stratified", "seed": seed,
                                                     "images": len(test), "of": whole}}


def _mine() -> None:
    """An item run without leases (a launch's processes other than the main one) is this process's to finish."""


class Worker:
    """Runs items in this process. A task is prepared (its start loaded, its small splits decoded) when its
    first item here runs, and kept while the next items are the same task's (the work list keeps a task's items
    together); its folder is recorded then (transfer.json), and given back when the preparation fails."""

    def __init__(self, cfg: TransferConfig, console: Console, tasks: dict[str, Task],
                 splits: dict[str, TaskSplits], folders: dict[str, Any]) -> None:
        self.cfg, self.console, self.tasks, self.splits, self.folders = cfg, console, tasks, splits, folders
        self._open: tuple[str, Prepared, dict[str, Any]] | None = None
        self._threads_said = False  # the threads line: said by this process's first run (`first_run`)

    def first_run(self) -> bool:
        """Whether the run about to start is this process's first (which says the threads it computes with)."""
        first, self._threads_said = not self._threads_said, True
        return first

    def prepared(self, name: str) -> tuple[Prepared, dict[str, Any]]:
        if self._open is None or self._open[0] != name:
            self._open = None  # the previous task's images go before the next task's come
            root, task = self.folders[name], self.tasks[name]
            record_task(self.cfg, task, True, root)
            try:
                prep, settings = open_task_run(self.cfg, task, self.splits.get(name), self.console)
            except BaseException:  # a start that is not there, data that cannot be read: nothing trained
                forget_task(root)
                raise
            self._open = (name, prep, settings)
        return self._open[1], self._open[2]

    def run(self, item: Item, choice: dict[str, Any] | None = None, points: int = 0,
            confirm: Callable[[], None] = _mine) -> None:
        """Run `item`; a final run with `choice` ({lr, steps, selection}); `points`: the size of the sweep grid
        (for the progress label). `confirm` raises when the item is no longer this process's (its lease was
        taken over): called before its marker is written, which says the item is done."""
        if item.kind == SWEEP:
            self.sweep_point(item, points, confirm)
        elif item.kind == FINAL:
            self.final(item, choice or {}, confirm)
        elif item.kind == CLOSED:
            self.closed(item, confirm)

    def sweep_point(self, item: Item, points: int, confirm: Callable[[], None] = _mine) -> None:
        """Train on trainN, score on valN; point.json keeps the numbers, the weights go."""
        prep, settings = self.prepared(item.task)
        root = self.folders[item.task]
        done = [p for p in (read_json_object(point_dir(root, lr, steps) / "point.json")
                            for lr, steps in self.cfg.points()) if p]  # in grid order: ties go to the first
        best = max(done, key=lambda p: p["val_top1"]) if done else None
        shown = f" | best val {best['val_top1']:.1%} (lr {best['lr']:g}, {best['steps']})" if best else ""
        tick = time.perf_counter()
        fitted = train_run(self.cfg, prep, item.lr, item.steps, item.folder, prep.train, prep.val, self.console,
                           f"{item.task} sweep {item.index}/{points} lr {item.lr:g} × {item.steps}{shown}",
                           {**settings, "phase": "sweep"}, say_threads=self.first_run())
        last = fitted.validated()
        point = {"lr": item.lr, "steps": item.steps, "val_top1": last["val_top1"], "val_loss": last["val_loss"],
                 "train_loss": last.get("loss"), "seconds": time.perf_counter() - tick}
        if fitted.main:
            confirm()  # (nothing is written or removed by a process that lost the item: it is another's now)
            write_json(item.marker, point)
            shutil.rmtree(item.folder / "checkpoints", ignore_errors=True)  # weights of a sweep point: not needed
            for name in WEIGHTS:
                (item.folder / name).unlink(missing_ok=True)

    def final(self, item: Item, choice: dict[str, Any], confirm: Callable[[], None] = _mine) -> None:
        """Retrain the chosen point on trainN ∪ valN with the item's seed, test it; final.json keeps the test
        figures and the task's settings (its result.json is assembled from them)."""
        prep, settings = self.prepared(item.task)
        lr, steps, selection = choice["lr"], choice["steps"], choice["selection"]
        seeds = self.cfg.seeds or [self.cfg.seed]
        label = (f"{item.task} final lr {lr:g} × {steps} on {len(prep.train) + len(prep.val)}"
                 + (f" seed {item.seed}" if len(seeds) > 1 else ""))
        tick = time.perf_counter()
        fitted = train_run(replace(self.cfg, seed=item.seed), prep, lr, steps, item.folder, prep.train_val, None,
                           self.console, label, {**settings, "phase": "final", "seed": item.seed,
                                                 "selection": selection, "chosen": {"lr": lr, "steps": steps}},
                           curves=self.cfg.curves and item.index == 0, say_threads=self.first_run())
        limit = len(prep.test)  # --test-samples drew them already (data/draws.py: one rule, eval's too)
        say(self.console, f"{item.task}: evaluating on {describe_test(prep.test, self.cfg.test_samples)} test images")
        tested = fitted.trainer.evaluate(prep.test, limit=limit, prefix="test_")
        if fitted.trainer.setup.ema is not None:  # --ema-decay: the average of the weights, tested beside them
            tested.update(fitted.trainer.evaluate(prep.test, limit=limit, prefix="ema_test_",
                                                  model=fitted.trainer.setup.ema.module))
        if fitted.main:
            confirm()
            write_json(item.marker, {"seed": item.seed, "chosen": {"lr": lr, "steps": steps}, "selection": selection,
                                     **tested, "test_samples": limit,
                                     "seconds": time.perf_counter() - tick, "settings": settings})

    def closed(self, item: Item, confirm: Callable[[], None] = _mine) -> None:
        """A closed-form method (few-shot least squares): nothing to sweep or train; the result at once."""
        prep, settings = self.prepared(item.task)
        began, task = time.perf_counter(), self.tasks[item.task]
        metrics = closed_form(prep, self.cfg.start, self.cfg.use_ema)
        result = {**settings, "group": task.group, "num_classes": task.num_classes, "sweep": [], "chosen": None,
                  "selection": "closed form", **metrics, "seconds": time.perf_counter() - began}
        confirm()
        write_json(item.marker, result)
        say(self.console, f"{task.name}: test top-1 {result['test_top1']:.2%} (closed form)")


__all__ = ["Worker", "open_task_run"]
