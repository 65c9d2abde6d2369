"""The VTAB-1k protocol in one call: sweep lr × steps on trainN → valN, retrain the chosen point on trainN ∪ valN,
report test accuracy; over one task or a suite, with group means.

Selection (`--select`): `suite`, the ViT paper's (Appendix B.1.1), sweeps every task first and chooses the one
(lr, steps) with the best mean val top-1 over the suite for all of them; `task` chooses per task (optimistic:
not comparable with the paper's Table 2). A suite defaults to `suite`, one task is the same either way.

    <output>/<suite>-<task>/transfer.json          the settings (a resumed transfer must match them)
    <output>/<suite>-<task>/sweep/lr<lr>_steps<n>/   one run per sweep point: metrics.jsonl, point.json
    <output>/<suite>-<task>/final/                  the retrained model (vitx checkpoint), its metrics, curves.png
    <output>/<suite>-<task>/sweep.png              val top-1 per lr × steps, the choice ringed (with --curves)
    <output>/<suite>-<task>/result.json            sweep table, choice, test accuracy, timings
    <output>/selection.json                         --select suite: the mean val top-1 per point, the choice
    <output>/summary.json                           every task's result and the group means

Every finished sweep point and task is on disk before the next starts; `--resume` continues where a killed
transfer stopped (inside a run, from its last checkpoint).
"""
from __future__ import annotations

import json
import re
import statistics
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import __version__
from ..checkpoint import atomic_write_text, cannot_write, read_json_object
from ..adapters import resolve_adapters
from ..errors import VitxError
from ..runner.launch import is_main_process
from ..runner.rundir import WEIGHTS
from ..runner.reporting import make_console
from ..data.opener import DataOptions
from ..tasks import GROUPS, Task, TaskSplits, open_task, select_tasks
from ..tasks.custom import describe_record
from ..tasks.published import matching, published
from .config import TransferConfig, result_settings
from .finetune import Prepared, closed_form, parameter_counts, prepare, train_run
from .report import print_selection, print_summary, summarise


def task_dir(cfg: TransferConfig, task: Task) -> Path:
    """`<output>/vtab-dtd`; a data task's folder is named after its data (`--task ~/data/photos` → `data-photos`)."""
    name = task.name if task.data is None else "data-" + Path(task.name.rstrip("/")).name
    return Path(cfg.output_dir) / re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "-")).strip("-")


def _write(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, indent=2))
    except OSError as exc:  # a read-only or full disk, a file where a folder goes: one line
        raise VitxError(f"{cannot_write(path.parent, exc)}; choose another --output-dir") from None


def _claim(cfg: TransferConfig, task: Task, resume: bool) -> tuple[Path, dict[str, Any] | None]:
    """The task's directory and its finished result (None until there is one); refuses to mix two different
    transfers in one directory."""
    root = task_dir(cfg, task)
    saved = read_json_object(root / "transfer.json")
    settings = result_settings(cfg)
    if saved is not None:
        if not resume:
            raise VitxError(f"{root} already holds a transfer of {task.name}; pass --resume to continue it, or "
                            "choose another --output-dir")
        changed = [k for k, v in settings.items() if saved.get(k, v) != v]  # a setting newer than the run: as is
        if changed:
            raise VitxError(f"cannot resume {root} with different settings ({', '.join(changed)}); choose another "
                            "--output-dir")
    _write(root / "transfer.json", settings)
    return root, read_json_object(root / "result.json")


def _open(cfg: TransferConfig, task: Task, splits: TaskSplits | None, console: Console) -> tuple[Prepared, dict[str, Any]]:
    """The task's prepared splits and start, its header lines, and the settings every file of its result carries."""
    prep = prepare(cfg, task, splits)
    console.print(f"{task.name}: {len(prep.train)} train + {len(prep.val)} val images, test {len(prep.test)} "
                  f"({prep.splits.origin}) at {prep.preprocess.image_size}px | from {cfg.start} | "
                  f"adapters {', '.join(a.describe() for a in prep.adapters)}", soft_wrap=True)
    pre = prep.preprocess
    console.print(f"{task.name}: input mean {tuple(round(v, 4) for v in pre.mean)}, std {tuple(round(v, 4) for v in pre.std)}, "
                  f"{pre.interpolation} ({prep.input_from})", soft_wrap=True)
    settings = {"task": task.name, **result_settings(cfg), "vitx_version": __version__,
                "source": prep.splits.source, "synthetic": prep.splits.synthetic,
                "input": {"mean": list(prep.preprocess.mean), "std": list(prep.preprocess.std),
                          "interpolation": prep.preprocess.interpolation, "from": prep.input_from},
                "parameters": parameter_counts(prep)}  # what the method trains, of the whole model
    counts = settings["parameters"]
    console.print(f"{task.name}: trains {counts['trainable']:,} of {counts['total']:,} parameters", soft_wrap=True)
    record = prep.splits.record
    if record is not None:  # how the splits were made: a data task's draw, a VTAB task's definition
        shown = describe_record(record) if task.data is not None else f"splits {record['definition']}"
        console.print(f"{task.name}: labels {task.label}; {shown}", soft_wrap=True)
        settings["splits"] = record
    return prep, settings


def _sweep(cfg: TransferConfig, prep: Prepared, root: Path, settings: dict[str, Any],
           console: Console) -> list[dict[str, Any]]:
    """Every (lr, steps) point trained on trainN and scored on valN; a point already on disk is read, not rerun."""
    task = prep.task
    sweep: list[dict[str, Any]] = []
    points = cfg.points() if cfg.sweep else []
    for i, (lr, steps) in enumerate(points, 1):
        point_dir = root / "sweep" / f"lr{lr:g}_steps{steps}"
        point = read_json_object(point_dir / "point.json")
        if point is None:
            best = max(sweep, key=lambda p: p["val_top1"]) if sweep else None
            shown = f" | best val {best['val_top1']:.1%} (lr {best['lr']:g}, {best['steps']})" if best else ""
            tick = time.perf_counter()
            fitted = train_run(cfg, prep, lr, steps, point_dir, prep.train, prep.val, console,
                               f"{task.name} sweep {i}/{len(points)} lr {lr:g} × {steps}{shown}",
                               {**settings, "phase": "sweep"})
            last = fitted.validated()
            point = {"lr": lr, "steps": steps, "val_top1": last["val_top1"], "val_loss": last["val_loss"],
                     "train_loss": last.get("loss"), "seconds": time.perf_counter() - tick}
            if fitted.main:
                _write(point_dir / "point.json", point)
                shutil.rmtree(point_dir / "checkpoints", ignore_errors=True)  # weights of a sweep point: not needed
                for name in WEIGHTS:
                    (point_dir / name).unlink(missing_ok=True)
        sweep.append(point)
    return sweep


def sweep_task(cfg: TransferConfig, task: Task, resume: bool = False, console: Console | None = None,
               splits: TaskSplits | None = None) -> list[dict[str, Any]]:
    """The first half of `--select suite`: the task's sweep alone (its finished result's, when it has one)."""
    console = console or make_console(cfg.quiet)
    root, done = _claim(cfg, task, resume)
    if done is not None:
        return done["sweep"]
    prep, settings = _open(cfg, task, splits, console)
    return _sweep(cfg, prep, root, settings, console)


def run_task(cfg: TransferConfig, task: Task, resume: bool = False, console: Console | None = None,
             splits: TaskSplits | None = None, chosen: dict[str, Any] | None = None) -> dict[str, Any]:
    """The whole protocol on one task; returns (and writes) its result. `chosen`: the suite's choice of (lr, steps)
    (`--select suite`), which replaces the task's own best point."""
    console = console or make_console(cfg.quiet)
    root, done = _claim(cfg, task, resume)
    if done is not None and chosen is not None and done.get("chosen") != {"lr": chosen["lr"], "steps": chosen["steps"]}:
        raise VitxError(f"{root} was retrained with {done.get('chosen')}, not the suite's choice lr {chosen['lr']:g} × "
                        f"{chosen['steps']}; choose another --output-dir")
    if done is not None:
        console.print(f"{task.name}: already done ({done['test_top1']:.2%} test top-1); nothing to do", soft_wrap=True)
        return done
    began = time.perf_counter()
    prep, settings = _open(cfg, task, splits, console)
    if prep.method.closed_form:
        metrics = closed_form(prep, cfg.test_samples, cfg.start, cfg.use_ema)
        result = {**settings, "group": task.group, "num_classes": task.num_classes, "sweep": [], "chosen": None,
                  "selection": "closed form", **metrics, "seconds": time.perf_counter() - began}
        _write(root / "result.json", result)
        console.print(f"{task.name}: test top-1 {result['test_top1']:.2%} (closed form)", soft_wrap=True)
        return result

    sweep = _sweep(cfg, prep, root, settings, console)
    if not sweep:
        best, selection = {"lr": cfg.lr, "steps": cfg.steps}, "fixed (--no-sweep)"
    elif chosen is not None:
        best, selection = chosen, "suite"
    else:
        best, selection = max(sweep, key=lambda p: p["val_top1"]), "task"
    if sweep and cfg.curves and is_main_process():  # sweep.png: val top-1 per lr × steps, the choice ringed
        from ..plots import SWEEP, draw_sweep, try_draw  # (a failure is a warning line)

        try_draw(SWEEP, draw_sweep, sweep, best, root / SWEEP, f"{task.name}: sweep on train → val",
                 warn=lambda line: console.print(line, markup=False, soft_wrap=True))

    tick = time.perf_counter()
    seeds = cfg.seeds or [cfg.seed]
    per_seed: list[dict[str, float]] = []
    for i, seed in enumerate(seeds):  # the final run once per seed: the spread of the reported number
        folder = root / ("final" if i == 0 else f"final-seed{seed}")
        label = (f"{task.name} final lr {best['lr']:g} × {best['steps']} on {len(prep.train) + len(prep.val)}"
                 + (f" seed {seed}" if len(seeds) > 1 else ""))
        fitted = train_run(replace(cfg, seed=seed), prep, best["lr"], best["steps"], folder, prep.train_val, None,
                           console, label, {**settings, "phase": "final", "seed": seed, "selection": selection,
                                            "chosen": {"lr": best["lr"], "steps": best["steps"]}},
                           curves=cfg.curves and i == 0)
        console.print(f"{task.name}: evaluating on {cfg.test_samples or len(prep.test)} test images", soft_wrap=True)
        limit = cfg.test_samples or len(prep.test)
        per_seed.append(fitted.trainer.evaluate(prep.test, limit=limit, prefix="test_"))
        if fitted.trainer.s.ema is not None:  # --ema-decay: the average of the weights, tested beside them
            per_seed[-1].update(fitted.trainer.evaluate(prep.test, limit=limit, prefix="ema_test_",
                                                        model=fitted.trainer.s.ema.module))
    top1 = [t["test_top1"] for t in per_seed]
    result = {**settings, "group": task.group, "num_classes": task.num_classes, "sweep": sweep,
              "chosen": {"lr": best["lr"], "steps": best["steps"]}, "selection": selection,
              "final_seconds": time.perf_counter() - tick,
              "test_top1": statistics.fmean(top1), "test_loss": statistics.fmean(t["test_loss"] for t in per_seed),
              "test_samples": min(cfg.test_samples or len(prep.test), len(prep.test)), "seconds": time.perf_counter() - began}
    if len(seeds) > 1:
        result.update(seeds=seeds, test_top1_per_seed=top1, test_top1_std=statistics.stdev(top1))
    if "ema_test_top1" in per_seed[0]:
        averaged = [t["ema_test_top1"] for t in per_seed]
        result.update(ema_test_top1=statistics.fmean(averaged), ema_test_top1_per_seed=averaged,
                      **({"ema_test_top1_std": statistics.stdev(averaged)} if len(seeds) > 1 else {}))
    if fitted.main:
        _write(root / "result.json", result)
    spread = f" ± {result['test_top1_std']:.2%} over seeds {seeds}" if len(seeds) > 1 else ""
    if "ema_test_top1" in result:
        spread += f" (EMA of the weights: {result['ema_test_top1']:.2%})"
    console.print(f"{task.name}: test top-1 {result['test_top1']:.2%}{spread} with lr {best['lr']:g} × {best['steps']} "
                  f"steps ({selection} selection, {result['seconds']:.0f} s) → {root}/final", soft_wrap=True)
    return result


def compare_with(cfg: TransferConfig, results: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """Published rows to show beside the results: `--compare` names, else those of the same timm start and
    method. Each with its numbers on the tasks run and its mean over the tasks counted here."""
    rows = [published(n) for n in cfg.compare] or matching(cfg.start, resolve_adapters(cfg.adapters)[-1].name)
    counted = [r["task"] for r in results if r["task"] not in summary["left_out"]]
    shown = {}
    for row in rows:
        values = row.per_task()
        same = [values[t] for t in counted if t in values]
        shown[row.name] = {"start": row.start, "method": row.method, "source": row.source, "printed_mean": row.mean,
                           "tasks": {r["task"]: values.get(r["task"]) for r in results},
                           "mean_same_tasks": sum(same) / len(same) if same else None,
                           "group_means_same_tasks": {
                               g: sum(v) / len(v) for g in summary["group_means"]
                               if (v := [values[r["task"]] for r in results if r.get("group") == g
                                         and r["task"] in counted and r["task"] in values])}}
    return shown


def choose_for_suite(sweeps: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The paper's selection: the (lr, steps) with the best mean val top-1 over the tasks (ties: the first in
    sweep order). Returns the choice and the table it was made from."""
    table = [{"lr": points[0]["lr"], "steps": points[0]["steps"],
              "mean_val_top1": statistics.fmean(p["val_top1"] for p in points),
              "val_top1": {task: p["val_top1"] for task, p in zip(sweeps, points)}} for points in zip(*sweeps.values())]
    best = max(table, key=lambda row: row["mean_val_top1"])
    return {"select": "suite", "lr": best["lr"], "steps": best["steps"], "mean_val_top1": best["mean_val_top1"],
            "tasks": list(sweeps), "table": table}


def transfer(cfg: TransferConfig, resume: bool = False, console: Console | None = None) -> dict[str, Any]:
    """Run the protocol on every task `cfg.task` selects; prints a table and writes summary.json."""
    cfg.validate()
    console = console or make_console(cfg.quiet)
    resolve_adapters(cfg.adapters)  # name errors now, not after the data is opened
    tasks = select_tasks(cfg.task, DataOptions(label_key=cfg.label_key or None, image_key=cfg.image_key or None,
                                               stream=cfg.stream, seed=cfg.seed))
    if cfg.select == "auto":  # the paper's one setting for a suite; for one task both are the same
        cfg = replace(cfg, select="suite" if len(tasks) > 1 else "task")
    opened: dict[str, TaskSplits] = {}
    missing: list[str] = []
    skipped: list[str] = []
    for task in tasks:  # find every data problem before hours of training, not after
        try:
            opened[task.name] = open_task(task, cfg.shots, cfg.data_dir, seed=cfg.seed, test_samples=cfg.test_samples)
        except VitxError as exc:
            if len(tasks) == 1 or not cfg.skip_missing:
                if len(tasks) == 1:
                    raise
                missing.append(f"{task.name} ({exc})")
            else:
                console.print(f"skipping {task.name}: {exc}", soft_wrap=True)
                skipped.append(task.name)
    if missing:
        raise VitxError(f"{len(missing)} of {len(tasks)} tasks have no data: {missing[0]}; ... "
                        "(pass --skip-missing to run the others)")
    chosen = None
    runnable = [t for t in tasks if t.name in opened]
    if cfg.select == "suite" and cfg.sweep and len(runnable) > 1 and not resolve_adapters(cfg.adapters)[-1].closed_form:
        sweeps = {t.name: sweep_task(cfg, t, resume, console, opened[t.name]) for t in runnable}
        # chosen on the tasks the means count (a synthetic task is left out of both unless --allow-synthetic)
        counted = [t.name for t in runnable if cfg.allow_synthetic or not opened[t.name].synthetic] or list(sweeps)
        chosen = choose_for_suite({name: sweeps[name] for name in counted})
        before = read_json_object(Path(cfg.output_dir) / "selection.json")
        if before is not None and (before["lr"], before["steps"], before["tasks"]) != \
                (chosen["lr"], chosen["steps"], chosen["tasks"]):
            raise VitxError(f"{cfg.output_dir} chose lr {before['lr']:g} × {before['steps']} on "
                            f"{', '.join(before['tasks'])}; these tasks would choose lr {chosen['lr']:g} × "
                            f"{chosen['steps']}: resume with the same tasks, or choose another --output-dir")
        _write(Path(cfg.output_dir) / "selection.json", chosen)
        print_selection(chosen, console)
    # after a suite's sweep, each task's folder is this transfer's own claim: its final run continues it
    results = [run_task(cfg, t, resume or chosen is not None, console, opened[t.name], chosen) for t in runnable]
    summary = summarise(results, len(tasks), skipped, cfg.allow_synthetic)
    summary["selection"] = chosen or {"select": results[0].get("selection") if results else cfg.select}
    summary["compare"] = compare_with(cfg, results, summary)
    _write(Path(cfg.output_dir) / "summary.json", {"tasks": results, **summary, "groups": list(GROUPS)})
    print_summary(results, summary, console)
    return {"tasks": results, **summary}
