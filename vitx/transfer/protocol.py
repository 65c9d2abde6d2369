"""The VTAB-1k protocol in one call: sweep lr × steps on trainN → valN, retrain the chosen point on trainN ∪ valN,
report test accuracy; over one task or a suite, with group means; in one process or many.

Selection (`--select`): `suite`, the ViT paper's (Appendix B.1.1), sweeps every task first and chooses the one
(lr, steps) with the best mean val top-1 over the suite for all of them; `task` chooses per task (optimistic:
not comparable with the paper's Table 2). A suite defaults to `suite`, one task is the same either way.

    <output>/suite.json                              the suite's settings and tasks (every process must match them)
    <output>/<suite>-<task>/transfer.json          the task's settings (a resumed transfer must match them)
    <output>/<suite>-<task>/sweep/lr<lr>_steps<n>/   one run per sweep point: metrics.jsonl, point.json
    <output>/<suite>-<task>/final/                  the retrained model (vitx checkpoint), its metrics, curves.png,
                                                    final.json (its test figures); final-seed<s>/ for --seeds
    <output>/<suite>-<task>/sweep.png              val top-1 per lr × steps, the choice ringed (with --curves)
    <output>/<suite>-<task>/result.json            sweep table, choice, test accuracy, timings
    <output>/selection.json                         --select suite: the mean val top-1 per point, the choice
    <output>/summary.json                           every task's result and the group means
    <output>/leases/, leases.log                     who runs which item now, and the journal of who ran what
    <output>/logs/<host>-<pid>-<id>/job<i>.log       --jobs: each job's output (and its settings, jobs.toml)

The suite is a list of work items (items.py: each sweep point, each seed's final run), each a run in its own
folder that resumes from its checkpoints and leaves a marker when done. Every process runs its share of the list
(all of it, or `--shard I/N`'s; `--jobs K` starts K processes that share it) through leases on the items
(leases.py), so that none is run twice; a task's result and the summary are assembled from the files by whichever
process finds them complete (assemble.py). One process is the same code path: it runs every item in order, then
assembles. `--resume` continues where a killed transfer stopped (inside a run, from its last checkpoint).
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from ..adapters import resolve_adapters
from ..errors import VitxError
from ..runner.launch import is_main_process
from ..console import make_console, say
from ..runner.threads import kept_threads
from ..runs.ownership import TRANSFER, check_output_dir
from ..runs.rundir import drop_if_unused
from ..runs.trained import stopped_early
from ..data.opener import DataOptions
from ..tasks import Task, TaskSplits, open_task, select_tasks
from .assemble import Assembler, compare_with
from .leases import Leases
from .config import TransferConfig, parse_shard
from .folders import check_suite, check_task, drop_suite, started, task_dir, task_dirs
from .items import selection_mode, shard_of, work_list
from .schedule import Scheduler, together
from .suite import Suite, choose_for_suite
from .work import Worker


def open_suite(cfg: TransferConfig, tasks: list[Task], folders: dict[str, Path], console: Console) -> Suite:
    """Open every task's data first (every data problem is found before hours of training, not after), then
    the work list of those that have it."""
    opened: dict[str, TaskSplits] = {}
    missing: list[str] = []
    skipped: list[str] = []
    for task in tasks:
        try:
            opened[task.name] = open_task(task, cfg.shots, cfg.data_dir, seed=cfg.seed, test_samples=cfg.test_samples)
        except VitxError as exc:
            if len(tasks) == 1 or not cfg.skip_missing:
                if len(tasks) == 1:
                    raise
                missing.append(f"{task.name} ({exc})")
            else:
                say(console, f"skipping {task.name}: {exc}")
                skipped.append(task.name)
    if missing:
        raise VitxError(f"{len(missing)} of {len(tasks)} tasks have no data: {missing[0]}; ... "
                        "(pass --skip-missing to run the others)")
    if skipped and cfg.shard:  # the work list, its partition and the suite's selection are every shard's alike
        raise VitxError(f"--skip-missing with --shard: no data here for {', '.join(skipped)}, and the shards of "
                        "one suite must share its tasks (else they split and choose differently); make the data "
                        "readable on every shard, or leave those tasks out of --task on all of them")
    runnable = [t for t in tasks if t.name in opened]
    closed = resolve_adapters(cfg.adapters)[-1].closed_form
    if closed:
        for splits in opened.values():
            check_closed_form(splits, cfg.shots)
    mode = selection_mode(cfg, len(runnable), closed)
    return Suite(cfg, tasks, runnable, opened, folders, mode, work_list(cfg, runnable, folders, mode), skipped)


def check_closed_form(splits: TaskSplits, shots: int) -> None:
    """A closed-form head (`--adapter fewshot`) is fitted on trainN ∪ valN: refused, before anything runs, when a
    class has no image there (`--shots 5` on 10 classes), by `vitx eval fewshot`'s own check: such a head never
    predicts that class, and too few images give chance accuracy without a word."""
    from ..evaluation.least_squares import require_shots

    task = splits.task
    require_shots(splits.train_val.labels(), task.num_classes, 1, f"--adapter fewshot on {task.name}: ",
                  f": --shots {shots} gives {shots} training images for {task.num_classes} classes, and the "
                  "closed-form head never predicts a class it has none of; pass a larger --shots")


def _shown_here(console: Console) -> Console:
    """The console, in the main process of a launch; in the others one that prints nothing (a launch's
    processes run each item together: its lines and tables once, not once per process)."""
    return console if is_main_process() else Console(quiet=True)


def _refuse_jobs_in_a_launch(cfg: TransferConfig) -> None:
    if cfg.jobs > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise VitxError("--jobs starts its own processes, one item each; run it without accelerate launch (or "
                        "launch one transfer per --shard)")


@kept_threads()  # the caller's torch threads back afterwards (each training fits them to its cores)
def transfer(cfg: TransferConfig, resume: bool = False, console: Console | None = None,
             page: Callable[..., None] | None = None) -> dict[str, Any]:
    """Run the protocol on every task `cfg.task` selects (this process's share, with --shard or --jobs); prints a
    table and writes summary.json once every item of the suite is on disk. Returns the summary (with
    `complete`: False and the `missing` items when other processes still have some to run). `page`: called as
    page(cfg, console[, stopped=True]) at the end or a stop (`vitx transfer` passes
    vitx.pages.write_transfer_page: the transfer's report.html)."""
    cfg.validate()
    check_output_dir(cfg.output_dir, writes=TRANSFER)  # a folder of the user's files is never written over
    console = console or make_console(cfg.quiet, cfg.log_format)
    resolve_adapters(cfg.adapters)  # name errors now, not after the data is opened
    tasks = select_tasks(cfg.task, DataOptions(label_key=cfg.label_key or None, image_key=cfg.image_key or None,
                                               stream=cfg.stream, seed=cfg.seed))
    if cfg.select == "auto":  # the paper's one setting for a suite; for one task both are the same
        cfg = replace(cfg, select="suite" if len(tasks) > 1 else "task")
    folders = task_dirs(cfg, tasks)  # unique, also where two data folders share a name
    if cfg.dry_run:
        from .estimate import dry_run

        return dry_run(cfg, tasks, folders, console)
    _refuse_jobs_in_a_launch(cfg)
    console = _shown_here(console)
    joining = resume or bool(cfg.shard)  # a shard joins the suite's folder, which the others write too
    names, begun = [t.name for t in tasks], any(started(f) for f in folders.values())
    check_suite(cfg, names, joining, begun, write=False, folders=folders.values())  # the suite's settings first
    for task in tasks:
        check_task(cfg, task, joining, folders[task.name])
    check_start(cfg)  # a --from that is not there or does not load: one line, before anything is written
    stopped = stopped_early(cfg.start)
    if stopped:
        say(console, stopped)
    made = not Path(cfg.output_dir).expanduser().exists()
    wrote = check_suite(cfg, names, joining, begun, folders=folders.values())
    try:
        suite = open_suite(cfg, tasks, folders, console)
        assembler = Assembler(suite, console, is_main_process())
        _run_share(suite, assembler, console)
    except BaseException:
        trained = any(started(f) for f in folders.values())
        if wrote and not trained:
            drop_suite(cfg)  # a failure before anything trained leaves no record to match
            if made:
                drop_if_unused(Path(cfg.output_dir).expanduser())  # nor a folder that passes for a transfer's
        elif trained and page:
            page(cfg, console, stopped=True)  # where the suite stands, then the stop goes on
        raise
    summary = _finish(suite, assembler, console)
    if page:
        page(cfg, console)
    return summary


def check_start(cfg: TransferConfig) -> None:
    """Refuse a start that is not there or does not load as one (a missing --from, a damaged run) before the
    output folder is made: its items load it only once they run, after the folder, its mark and leases/ are
    written. A timm name is checked by building its architecture (nothing is fetched); the caller's generators
    are left as they were (a vitx run's architecture is initialised before its weights are read)."""
    import torch

    from .estimate import architecture

    with torch.random.fork_rng(devices=[]):
        architecture(cfg)


def _run_share(suite: Suite, assembler: Assembler, console: Console) -> None:
    """This process's share of the work list: its shard's items (all without --shard), run here or by --jobs
    child processes."""
    cfg = suite.cfg
    index, count = parse_shard(cfg.shard)
    mine = shard_of(suite.items, index, count)
    if cfg.jobs > 1:
        from .jobs import describe_failures, run_jobs

        failed = run_jobs(cfg, mine, suite.done, console)
        if failed:
            raise describe_failures(failed)
        return
    worker = Worker(cfg, console, {t.name: t for t in suite.runnable}, suite.splits, suite.folders)
    Scheduler(suite, worker, assembler, _leases(suite, assembler), mine, cfg.wait, console, (index, count)).run()
    together()  # a launch's processes read what its main one wrote


def _leases(suite: Suite, assembler: Assembler) -> Leases | None:
    """This process's leases (None in a launch's processes other than the main one, which leases for all)."""
    return Leases(suite.output, assembler.say) if assembler.main else None


def _finish(suite: Suite, assembler: Assembler, console: Console) -> dict[str, Any]:
    """The summary when every item is on disk; else what is done, and what is not yet."""
    summary = assembler.summary()
    if summary is not None:
        return summary
    left = [i.key for i in suite.items if not suite.done(i)]
    shown = ", ".join(left[:4]) + (", ..." if len(left) > 4 else "")
    say(console, f"{len(left)} of the suite's {len(suite.items)} items are not on disk yet ({shown}): the process "
                 "that finishes the last writes summary.json (or run the suite again with --resume)")
    done = [r for r in (assembler.task_result(t.name) for t in suite.runnable) if r is not None]
    return {"tasks": done, "complete": False, "missing": left}


def run_task(cfg: TransferConfig, task: Task, resume: bool = False, console: Console | None = None,
             splits: TaskSplits | None = None, chosen: dict[str, Any] | None = None,
             root: Path | None = None) -> dict[str, Any]:
    """The whole protocol on one task in this process; returns (and writes) its result. `chosen`: a suite's
    {lr, steps}, which replaces the task's own best point. `root`: the task's folder (default `task_dir`'s)."""
    console = _shown_here(console or make_console(cfg.quiet, cfg.log_format))
    root = root or task_dir(cfg, task)
    check_task(cfg, task, resume, root)
    splits = splits or open_task(task, cfg.shots, cfg.data_dir, seed=cfg.seed, test_samples=cfg.test_samples)
    closed = resolve_adapters(cfg.adapters)[-1].closed_form
    if closed:
        check_closed_form(splits, cfg.shots)
    mode = selection_mode(replace(cfg, select="task"), 1, closed)
    folders = {task.name: root}
    suite = Suite(cfg, [task], [task], {task.name: splits}, folders, mode, work_list(cfg, [task], folders, mode),
                  given=chosen)
    assembler = Assembler(suite, console, is_main_process())
    worker = Worker(cfg, console, {task.name: task}, suite.splits, folders)
    Scheduler(suite, worker, assembler, _leases(suite, assembler), suite.items, False, console).run()
    together()
    result = assembler.task_result(task.name)
    if result is None:
        raise VitxError(f"{root}: some of the task's runs are held by another process; run it again when they end")
    return result


__all__ = ["choose_for_suite", "compare_with", "open_suite", "run_task", "task_dir", "task_dirs", "transfer"]
