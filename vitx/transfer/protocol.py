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

import contextlib
import hashlib
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
from ..runs.ownership import check_output_dir
from ..runs.rundir import WEIGHTS, mark_run
from ..settings import current_values
from ..runner.reporting import make_console
from ..data.opener import DataOptions
from ..tasks import GROUPS, Task, TaskSplits, open_task, select_tasks
from ..tasks.custom import describe_record
from ..tasks.published import matching, published
from .config import TransferConfig, result_settings
from .finetune import Prepared, closed_form, parameter_counts, prepare, train_run
from .report import print_selection, print_summary, summarise


def _folder_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "-")).strip("-")


def task_dir(cfg: TransferConfig, task: Task) -> Path:
    """`<output>/vtab-dtd`; a data task's folder is named after its data (`--task ~/data/photos` → `data-photos`)."""
    name = task.name if task.data is None else "data-" + Path(task.name.rstrip("/")).name
    return Path(cfg.output_dir) / _folder_name(name)


def task_dirs(cfg: TransferConfig, tasks: list[Task]) -> dict[str, Path]:
    """Each task's folder, by task name: `task_dir`'s, unless data tasks of one transfer share it (`--task
    a/photos,b/photos`): then each is named after as much of its path as tells them apart (data-a-photos,
    data-b-photos), or, where no part does, its path's hash. Deterministic: a resumed transfer finds its own."""
    named = {t.name: task_dir(cfg, t) for t in tasks}
    for folder in {f for f in named.values() if list(named.values()).count(f) > 1}:
        group = [t for t in tasks if named[t.name] == folder and t.data is not None]
        parts = {t.name: Path(t.name.rstrip("/")).parts for t in group}
        taken = {f.name for n, f in named.items() if n not in parts}
        for depth in range(2, max((len(p) for p in parts.values()), default=0) + 1):
            names = {n: "data-" + _folder_name("-".join(p[-depth:])) for n, p in parts.items()}
            if len(set(names.values())) == len(names) and not taken & set(names.values()):
                break
        else:
            names = {n: f"{folder.name}-{hashlib.sha256(n.encode()).hexdigest()[:8]}" for n in parts}
        named.update({n: Path(cfg.output_dir) / name for n, name in names.items()})
    return named


def _write(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, indent=2))
    except OSError as exc:  # a read-only or full disk, a file where a folder goes: one line
        raise VitxError(f"{cannot_write(path.parent, exc)}; choose another --output-dir") from None


def _started(root: Path) -> bool:
    """Whether a task's transfer has trained or fitted anything there: a sweep point, a final run, a result. A
    claim (transfer.json) without any is no transfer: a run that failed or was killed before training."""
    return (root / "result.json").exists() or (root / "sweep").exists() or any(root.glob("final*"))


def _other_task(recorded: Any, name: str) -> bool:
    """Whether a task folder's recorded task is surely not `name`: two local paths that are different folders,
    or two names that are not paths here (registered tasks, hf:NAME). A path spelt another way, or from another
    directory, is given the benefit of the doubt, as before tasks were recorded."""
    if not isinstance(recorded, str) or recorded.rstrip("/") == name.rstrip("/"):
        return False
    a, b = Path(recorded).expanduser(), Path(name).expanduser()
    if a.exists() and b.exists():
        return a.resolve() != b.resolve()
    return not a.exists() and not b.exists()


def _release(root: Path) -> None:
    """Take back the claim of a task that trained nothing (its setup failed), so that the corrected command runs
    as new, without --resume: transfer.json goes, and the folder when that leaves it empty."""
    if _started(root):
        return
    (root / "transfer.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        root.rmdir()


def _claim(cfg: TransferConfig, task: Task, resume: bool,
           root: Path | None = None) -> tuple[Path, dict[str, Any] | None]:
    """The task's directory (`root`; default `task_dir`'s) and its finished result (None until there is one);
    refuses to mix two different transfers in one directory."""
    root = root or task_dir(cfg, task)
    saved = read_json_object(root / "transfer.json")
    saved = current_values(TransferConfig, saved) if saved is not None else None  # (a setting's former value names)
    settings = result_settings(cfg)
    if saved is not None and _started(root):  # (a claim that trained nothing blocks nothing: it is replaced)
        if _other_task(saved.get("task"), task.name):
            raise VitxError(f"{root} holds a transfer of {saved['task']}, not {task.name}; choose another "
                            "--output-dir")
        if not resume:
            raise VitxError(f"{root} already holds a transfer of {task.name}; pass --resume to continue it, or "
                            "choose another --output-dir")
        changed = [k for k, v in settings.items() if saved.get(k, v) != v]  # a setting newer than the run: as is
        if changed:
            raise VitxError(f"cannot resume {root} with different settings ({', '.join(changed)}); choose another "
                            "--output-dir")
    _own(Path(cfg.output_dir))
    _write(root / "transfer.json", {"task": task.name, **settings})
    return root, read_json_object(root / "result.json")


def _own(output: Path) -> None:
    """Mark the transfer's --output-dir as vitx's (runs/ownership.py) before the first file is written there."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        mark_run(output)
    except OSError as exc:
        raise VitxError(f"{cannot_write(output, exc)}; choose another --output-dir") from None


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
               splits: TaskSplits | None = None, root: Path | None = None) -> list[dict[str, Any]]:
    """The first half of `--select suite`: the task's sweep alone (its finished result's, when it has one).
    `root`: the task's folder (default `task_dir`'s)."""
    console = console or make_console(cfg.quiet, cfg.log_format)
    root, done = _claim(cfg, task, resume, root)
    if done is not None:
        return done["sweep"]
    prep, settings = _opened(cfg, task, splits, console, root)
    return _sweep(cfg, prep, root, settings, console)


def _opened(cfg: TransferConfig, task: Task, splits: TaskSplits | None, console: Console,
            root: Path) -> tuple[Prepared, dict[str, Any]]:
    """`_open`, whose failure (a start that is not there, data that cannot be read) takes back the task's claim
    when nothing was trained yet: a retry needs no --resume."""
    try:
        return _open(cfg, task, splits, console)
    except BaseException:
        _release(root)
        raise


def run_task(cfg: TransferConfig, task: Task, resume: bool = False, console: Console | None = None,
             splits: TaskSplits | None = None, chosen: dict[str, Any] | None = None,
             root: Path | None = None) -> dict[str, Any]:
    """The whole protocol on one task; returns (and writes) its result. `chosen`: the suite's choice of (lr, steps)
    (`--select suite`), which replaces the task's own best point. `root`: the task's folder (default
    `task_dir`'s)."""
    console = console or make_console(cfg.quiet, cfg.log_format)
    root, done = _claim(cfg, task, resume, root)
    if done is not None and chosen is not None and done.get("chosen") != {"lr": chosen["lr"], "steps": chosen["steps"]}:
        raise VitxError(f"{root} was retrained with {done.get('chosen')}, not the suite's choice lr {chosen['lr']:g} × "
                        f"{chosen['steps']}; choose another --output-dir")
    if done is not None:
        console.print(f"{task.name}: already done ({done['test_top1']:.2%} test top-1); nothing to do", soft_wrap=True)
        return done
    began = time.perf_counter()
    prep, settings = _opened(cfg, task, splits, console, root)
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
        if fitted.trainer.setup.ema is not None:  # --ema-decay: the average of the weights, tested beside them
            per_seed[-1].update(fitted.trainer.evaluate(prep.test, limit=limit, prefix="ema_test_",
                                                        model=fitted.trainer.setup.ema.module))
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
    check_output_dir(cfg.output_dir)  # a folder of the user's files is never written over
    console = console or make_console(cfg.quiet, cfg.log_format)
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
    folders = task_dirs(cfg, tasks)  # unique, also where two data folders share a name
    if cfg.select == "suite" and cfg.sweep and len(runnable) > 1 and not resolve_adapters(cfg.adapters)[-1].closed_form:
        sweeps = {t.name: sweep_task(cfg, t, resume, console, opened[t.name], folders[t.name]) for t in runnable}
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
    results = [run_task(cfg, t, resume or chosen is not None, console, opened[t.name], chosen, folders[t.name])
               for t in runnable]
    summary = summarise(results, len(tasks), skipped, cfg.allow_synthetic)
    summary["selection"] = chosen or {"select": results[0].get("selection") if results else cfg.select}
    summary["compare"] = compare_with(cfg, results, summary)
    _write(Path(cfg.output_dir) / "summary.json", {"tasks": results, **summary, "groups": list(GROUPS)})
    print_summary(results, summary, console)
    return {"tasks": results, **summary}
