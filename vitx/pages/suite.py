"""The page of a transfer (`vitx transfer`'s --output-dir: one task or a suite, or one task's folder): per task
the chosen lr × steps and its sweep, test top-1 (mean ± s.d. over seeds), the published rows beside it with
their means over the same tasks, what was selected and why, the start's preprocessing, and where an unfinished
suite stands. Numbers come from summary.json, each task's result.json and point.json/final.json, selection.json
and suite.json; the published rows' means over the same tasks are `transfer.assemble.compare_with`'s, the one
function summary.json's come from."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..safe_io import read_json_object, read_record
from ..errors import VitxError
from .html import (Html, banner, code, command_block, data_json, details, document, esc, number, pairs, para, pct, pm,
                   section, table, tag)
from .records import changed_settings, rebuilt_command
from .run import changed_table


@dataclass
class Transfer:
    """A transfer folder as its files hold it. `results`: each task's result.json in the suite's order (those
    on disk); `summary`: summary.json, once every task has its result."""

    path: Path
    settings: dict[str, Any]
    tasks: list[str]
    folders: dict[str, Path]
    results: dict[str, dict[str, Any]]
    summary: dict[str, Any] | None
    selection: dict[str, Any] | None
    leases: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """summary.json written, or (a task's own folder, which has none) its one task's result."""
        return self.summary is not None or (len(self.tasks) == 1 and len(self.results) == 1)


def _task_folders(path: Path) -> dict[str, Path]:
    """Task name → folder, from each folder's transfer.json (`path` itself when it is a task's folder)."""
    candidates = [path] if (path / "transfer.json").is_file() else sorted(p for p in path.iterdir() if p.is_dir())
    folders = {}
    for folder in candidates:
        record = read_record(folder / "transfer.json")
        if record is not None:
            folders[str(record.get("task", folder.name))] = folder
    return folders


def open_transfer(path: Path) -> Transfer:
    folders = _task_folders(path)
    one_task = (path / "transfer.json").is_file()
    suite = read_record(path / "suite.json") if not one_task else None
    summary = read_record(path / "summary.json") if not one_task else None
    for name, record, item in (("suite.json", suite, str), ("summary.json", summary, dict)):
        listed = (record or {}).get("tasks", [])
        if not isinstance(listed, list) or not all(isinstance(t, item) and (item is str or "task" in t)
                                                   for t in listed):
            raise VitxError(f"{path / name} is damaged: its tasks are not the "
                            f"{'task names' if item is str else 'task results'} vitx writes")
    tasks = [str(t) for t in (suite or {}).get("tasks", [])] or \
        [r["task"] for r in (summary or {}).get("tasks", [])] or list(folders)
    if not tasks:
        raise VitxError(f"{path} holds no transferred task (no suite.json, summary.json or task folders)")
    settings = dict((suite or {}).get("settings") or {})
    if not settings:
        first = read_record(folders[tasks[0]] / "transfer.json") if tasks[0] in folders else None
        settings = {k: v for k, v in (first or {}).items() if k != "task"}
    if summary is not None:
        results = {r["task"]: r for r in summary.get("tasks", [])}
    else:
        results = {t: r for t in tasks if t in folders and (r := read_record(folders[t] / "result.json"))}
    if one_task and tasks[0] in results:
        summary = None  # one task's folder: its result alone
    selection = read_record((path if not one_task else path.parent) / "selection.json")
    return Transfer(path, settings, tasks, folders, results, summary, selection, _leases(path))


def _leases(path: Path) -> list[dict[str, Any]]:
    """The items other processes hold now (leases/*.lease, transfer/leases.py), with the age of their heartbeat."""
    held = []
    for lease in sorted((path / "leases").glob("*.lease")) if (path / "leases").is_dir() else []:
        record = read_json_object(lease) or {}
        try:
            age = time.time() - lease.stat().st_mtime
        except OSError:
            continue
        held.append({"item": lease.stem, "host": record.get("host", "?"), "pid": record.get("pid", "?"), "age": age})
    return held


def _status(t: Transfer) -> tuple[str, Html]:
    from ..transfer.leases import STALE_AFTER

    done = len(t.results)
    if t.summary is not None:
        return "finished", esc(f"{done} of {len(t.tasks)} task(s) transferred; summary.json written.")
    live = [c for c in t.leases if c["age"] < STALE_AFTER]
    if live:
        shown = ", ".join(f"{c['item']} ({c['host']}, pid {c['pid']})" for c in live[:4]) + \
            (", ..." if len(live) > 4 else "")
        return "running", esc(f"{done} of {len(t.tasks)} task(s) have their result; running now: {shown}. This page "
                              "shows the transfer as it stood when the page was written.")
    if len(t.tasks) == 1 and done == 1:
        return "finished", esc("the task's result.json is written.")
    return "incomplete", esc(f"{done} of {len(t.tasks)} task(s) have their result and no process holds an item: "
                             "run the same command with --resume to finish it.")


def _command(t: Transfer) -> Html:
    from ..transfer.config import TransferConfig

    recorded = None  # as typed: a final run's config.json (with --jobs or --shard, a process's own share)
    for task in t.tasks:
        config = read_json_object(t.folders.get(task, t.path) / "final" / "config.json") or {}
        if str(config.get("command", "")).startswith("vitx transfer"):
            recorded = config["command"]
            break
    settings = {**t.settings, "task": ",".join(t.tasks), "output_dir": str(t.path)}
    rebuilt = rebuilt_command("transfer", settings, TransferConfig)
    parts = [para("The same transfer from the command line (its settings that differ from the defaults, as "
                  "suite.json records them):"), command_block(rebuilt)]
    if recorded and recorded != rebuilt:
        parts += [para("The command line its final runs recorded:"), command_block(recorded)]
    if not t.complete:
        parts.append(para("The same command with --resume finishes it: each item resumes from its own checkpoints."))
    return section("Reproduce", *parts, id_="reproduce")


def _settings(t: Transfer) -> Html:
    from ..transfer.config import TransferConfig

    return section("Settings that differ from the defaults",
                   changed_table(changed_settings(t.settings, TransferConfig)), id_="settings")


def _chosen_point(r: dict[str, Any]) -> dict[str, Any] | None:
    chosen = r.get("chosen") or {}
    return next((p for p in r.get("sweep") or [] if (p["lr"], p["steps"]) == (chosen.get("lr"), chosen.get("steps"))),
                None)


def _results(t: Transfer) -> Html:
    """The results table: what `vitx transfer` printed, with the published rows summary.json carries."""
    summary = t.summary or {}
    compare = summary.get("compare") or {}
    sources = {r.get("source", "") for r in t.results.values()}
    one_source = len(sources) == 1
    header = ["task", "group", "source", "classes", "shots", "chosen lr × steps", "val top-1", "test top-1",
              *compare, "time"]
    rows, values = [], {}
    for task in t.tasks:
        r = t.results.get(task)
        if r is None:
            rows.append((task, "", "", "", "", "", "", "not done yet", *("" for _ in compare), ""))
            continue
        chosen, point = r.get("chosen"), _chosen_point(r)
        seeds = len(r.get("test_top1_per_seed") or []) or 1
        rows.append((task, r.get("group", ""), r.get("source", ""), r.get("num_classes", ""), r.get("shots", ""),
                     f"{chosen['lr']:g} × {chosen['steps']}" if chosen else "closed form",
                     pct(point["val_top1"], 1) if point else "—",
                     pm(r["test_top1"], r.get("test_top1_std")) + (f" ({seeds} seeds)" if seeds > 1 else ""),
                     *(pct(c["tasks"].get(task), 1) for c in compare.values()), f"{r.get('seconds', 0):.0f} s"))
        values[task] = {"test_top1": r["test_top1"], **({"test_top1_std": r["test_top1_std"]}
                                                         if "test_top1_std" in r else {})}
    marked = []
    if t.summary is not None and (len(t.tasks) > 1 or summary.get("skipped")):
        blank = ("",) * 6
        for group, mean in summary.get("group_means", {}).items():
            marked.append(len(rows))
            rows.append((f"mean {group}", *blank, pm(mean, summary.get("group_std", {}).get(group)),
                         *(pct(c["group_means_same_tasks"].get(group), 1) for c in compare.values()),
                         f"{summary['group_counts'][group]} task(s)"))
        if summary.get("mean") is not None:
            marked.append(len(rows))
            rows.append(("mean", *blank, pm(summary["mean"], summary.get("std")),
                         *(pct(c["mean_same_tasks"], 1) for c in compare.values()),
                         f"over {summary['counted']} of {summary['selected']}"))
    notes = []
    if summary.get("skipped"):
        notes.append(f"skipped (no data): {', '.join(summary['skipped'])}")
    if summary.get("left_out"):
        notes.append("not in the means (synthetic data; --allow-synthetic counts them): " + ", ".join(summary["left_out"]))
    for name, c in compare.items():
        notes.append(f"{name}: {c['start']}, {c['method']} ({c['source']})"
                     + (f", printed mean over 19: {c['printed_mean']}" if c["printed_mean"] else "")
                     + "; its means here are over the same tasks as the run's"
                     + (f"; its setup differs: {', '.join(c['differs'])}" if c.get("differs") else ""))
    figures = {"tasks": values, **({k: summary[k] for k in ("group_means", "mean", "group_std", "std")
                                    if k in summary})}
    if one_source:  # (the same for every task: said once, above the table)
        header.pop(2)
        rows = [row[:2] + row[3:] for row in rows]
    n = len(header)
    first_number = 2 if one_source else 3
    numeric = (first_number, first_number + 1, *range(first_number + 3, n))
    data = f"; data: {next(iter(sources))}" if one_source and next(iter(sources)) else ""
    body = [table(header, rows, numeric=numeric, marked=marked, class_="wide" if n > 10 else None,
                  caption="test top-1 on each task's test split (mean ± s.d. over the seeds where there are several); "
                          f"val top-1 of the chosen sweep point; published rows in %{data}",
                  data_table="results", data_values=data_json(figures))]
    body += [para(n_) for n_ in notes]
    return section("Results", *body, id_="results")


def _published(t: Transfer) -> Html:
    """Every published VTAB-1k row vitx ships (the ViT paper's Table 9, the PEFT papers' rows), with its means
    over the tasks this transfer counted, by `compare_with` (as summary.json's)."""
    if t.summary is None or not any(task.startswith("vtab/") for task in t.tasks):
        return ""
    import dataclasses

    from ..tasks.published import ROWS
    from ..transfer.assemble import compare_with
    from ..transfer.config import TransferConfig

    names = {f.name for f in dataclasses.fields(TransferConfig)}
    cfg = TransferConfig(**{k: v for k, v in t.settings.items() if k in names and k != "compare"},
                         compare=[row.name for row in ROWS])  # the transfer's settings, every published row
    results = [t.results[task] for task in t.tasks if task in t.results]
    try:
        shown = compare_with(cfg, results, t.summary)
    except VitxError as exc:  # (a method adapter of a plugin not installed here, say)
        return section("Published VTAB-1k rows", para(f"Not shown: {exc.user_message()}"), id_="published")
    groups = list(t.summary.get("group_means") or {}) or ["natural", "specialized", "structured"]
    ours = ("this transfer", "", "", *(pm(t.summary["group_means"].get(g), t.summary.get("group_std", {}).get(g))
                                       for g in groups), pm(t.summary.get("mean"), t.summary.get("std")), "", "")
    sources = list(dict.fromkeys(c["source"] for c in shown.values()))
    rows = [ours] + [(name, c["start"], c["method"], *(pct(c["group_means_same_tasks"].get(g), 2) for g in groups),
                      pct(c["mean_same_tasks"], 2), c["printed_mean"] or "—", f"[{sources.index(c['source']) + 1}]")
                     for name, c in shown.items()]
    counted = t.summary.get("counted", 0)
    notes = [para(f"[{i}] {source}", class_="meta") for i, source in enumerate(sources, 1)]
    return section("Published VTAB-1k rows", table(
        ["row", "start", "method", *(f"{g} mean" for g in groups), f"mean (same {counted} tasks)", "printed mean",
         "source"], rows, numeric=range(3, 4 + len(groups)), marked=[0], class_="wide",
        caption="each published row's means over the same tasks this transfer counts (not the printed 19-task "
                "means, unless all 19 ran); test top-1",
        data_table="published", data_values=data_json({name: {"group_means": c["group_means_same_tasks"],
                                                              "mean": c["mean_same_tasks"]}
                                                       for name, c in shown.items()})), *notes, id_="published")


def _points(t: Transfer) -> list[tuple[float, int]]:
    """The sweep grid as the tasks' results list it (grid order), else as suite.json's settings give it."""
    for r in t.results.values():
        if r.get("sweep"):
            return [(p["lr"], p["steps"]) for p in r["sweep"]]
    s = t.settings
    if s.get("sweep", True) and s.get("lrs") and s.get("sweep_steps"):
        return [(lr, steps) for steps in s["sweep_steps"] for lr in s["lrs"]]
    return []


def _shade(value: float, low: float, high: float) -> str:
    share = 0.0 if high <= low else (value - low) / (high - low)
    return f"background: rgba(31, 95, 191, {0.08 + 0.42 * share:.2f})"


def _selection(t: Transfer, figures: bool) -> Html:
    """What was selected and why: the sweep as a heatmap (val top-1 per task and point, the chosen one outlined),
    the suite's mean row when one point was chosen for all, and each task's sweep figure."""
    points = _points(t)
    mode = (t.summary or {}).get("selection", {}).get("select") or t.settings.get("select", "")
    first = next(iter(t.results.values()), {})
    sweeps = {task: (t.results.get(task) or {}).get("sweep") or _points_on_disk(t, task) for task in t.tasks}
    if not points or not any(sweeps.values()):  # (a suite in progress or stopped: its finished sweep points are on disk)
        how = first.get("selection") or mode
        text = ("No sweep: every final run trains the fixed lr × steps (--no-sweep)." if "fixed" in str(how) else
                "Closed form: no sweep and no training (few-shot least squares)." if how == "closed form" else
                "No sweep points on disk yet.")
        return section("Selection", para(text), id_="selection")
    why = {"suite": "the ViT paper's selection (Appendix B.1.1): one lr × steps for every task, the best mean "
                    "validation top-1 over the tasks counted",
           "task": "each task's own best validation top-1 (optimistic: not comparable with the paper's Table 2)"}
    header = ["task", *(f"{lr:g} × {steps}" for lr, steps in points)]
    rows, values = [], {}
    for task in t.tasks:
        r = t.results.get(task)
        sweep = {(p["lr"], p["steps"]): p for p in sweeps[task]}
        if not sweep:
            continue
        vals = [p["val_top1"] for p in sweep.values()]
        chosen = (r or {}).get("chosen") or {}
        cells = []
        for lr, steps in points:
            p = sweep.get((lr, steps))
            if p is None:
                cells.append("—")
                continue
            is_chosen = (lr, steps) == (chosen.get("lr"), chosen.get("steps"))
            cells.append(_heat_cell(p["val_top1"], min(vals), max(vals), is_chosen))
        rows.append((task, *cells))
        values[task] = [[p["lr"], p["steps"], p["val_top1"]] for p in sweep.values()]
    marked = []
    choice = t.selection if mode == "suite" else None
    if choice and choice.get("table"):
        means = {(row["lr"], row["steps"]): row["mean_val_top1"] for row in choice["table"]}
        marked.append(len(rows))
        rows.append((f"mean over {len(choice.get('tasks', []))} tasks",
                     *(_heat_cell(means[pt], min(means.values()), max(means.values()),
                                  pt == (choice["lr"], choice["steps"])) if pt in means else "—" for pt in points)))
    said = why.get(str(mode), str(mode))
    chosen_line = (f" Chosen: lr {choice['lr']:g} × {choice['steps']} steps, mean validation top-1 "
                   f"{pct(choice['mean_val_top1'])}." if choice and "lr" in choice else "")
    body = [para(f"Selection: {said}.{chosen_line} Each task's sweep trains on its train split and scores on its "
                 "val split; the chosen point (outlined) is then retrained on train ∪ val and tested."),
            _heat_table(header, rows, marked, values)]
    if figures:
        body.append(_sweep_figures(t))
    return section("Selection and sweep", *body, id_="selection")


def _heat_cell(value: float, low: float, high: float, chosen: bool) -> Html:
    return tag("td", pct(value, 1), class_="heat chosen" if chosen else "heat", style=_shade(value, low, high))


def _heat_table(header: list[str], rows: list[tuple[Any, ...]], marked: list[int], values: dict[str, Any]) -> Html:
    """A table whose cells are already <td>s (their shade says how close each point came)."""
    head = tag("thead", tag("tr", *(tag("th", h, class_="num" if i else None) for i, h in enumerate(header))))
    body = tag("tbody", *(tag("tr", tag("td", row[0]), *(c if isinstance(c, Html) and c.startswith("<td")
                                                           else tag("td", c, class_="num") for c in row[1:]),
                              class_="marked" if i in marked else None) for i, row in enumerate(rows)))
    return tag("table", tag("caption", "validation top-1 per sweep point, lr × steps (darker: closer to the task's "
                                       "best)"), head,
               body, class_="wide heatmap", data_table="sweep", data_values=data_json(values))


def _points_on_disk(t: Transfer, task: str) -> list[dict[str, Any]]:
    """An unfinished task's sweep points that are done (sweep/*/point.json)."""
    folder = t.folders.get(task)
    if folder is None or not (folder / "sweep").is_dir():
        return []
    return [p for p in (read_json_object(d / "point.json") for d in sorted((folder / "sweep").iterdir())) if p]


def _sweep_figures(t: Transfer) -> Html:
    """Each task's sweep.png, inline: validation top-1 against the learning rate, a line per step count, the
    chosen point ringed (plots/sweep.py)."""
    from ..plots import draw_sweep, sweep_lines
    from .svg import figure, inline_svg

    drawn = []
    for i, task in enumerate(t.tasks):
        r = t.results.get(task)
        if not r or not r.get("sweep"):
            continue
        title = f"{task}: sweep on train → val"
        svg, _ = inline_svg(lambda path, r=r, title=title: draw_sweep(r["sweep"], r.get("chosen"), path, title),
                            f"sweep{i}")
        lines = {str(steps): [list(pt) for pt in line] for steps, line in sweep_lines(r["sweep"]).items()}
        drawn.append(figure(svg, f"sweep:{task}", title, {"lines": lines, "chosen": r.get("chosen")}))
    return tag("div", *drawn, class_="figures")


def _start(t: Transfer) -> Html:
    """The start and its preprocessing: what each task's result records (input mean/std, interpolation and where
    they come from, what the method trains)."""
    from ..runs.start import describe_start

    start = str(t.settings.get("start", "?"))
    adapters = ", ".join(t.settings.get("adapters") or []) or "the defaults (resize-posemb, zero-head, finetune)"
    rows: list[tuple[Any, Any]] = [("start", describe_start(start).replace("`", "")), ("adapters", adapters),
                                   ("image size", t.settings.get("image_size") or "the start's own")]
    inputs: dict[str, list[str]] = {}
    for task in t.tasks:
        r = t.results.get(task) or {}
        i = r.get("input")
        if i:
            inputs.setdefault(f"mean {i.get('mean')}, std {i.get('std')}, {i.get('interpolation')} ({i.get('from')})",
                              []).append(task)
    for text, tasks in inputs.items():
        rows.append(("input" if len(inputs) == 1 else f"input: {', '.join(tasks)}", text))
    counts = {(r.get("parameters") or {}).get("trainable"): (r.get("parameters") or {}).get("total")
              for r in t.results.values() if r.get("parameters")}
    if len(counts) == 1:
        trainable, total = next(iter(counts.items()))
        rows.append(("trained", f"{number(trainable)} of {number(total)} parameters"))
    protocol = t.settings.get("protocol", "")
    rows.append(("protocol", f"{protocol}: {t.settings.get('shots', '?')} labelled images per task (train + val), "
                             f"{t.settings.get('optimizer', '?')} batch {t.settings.get('batch_size', '?')}"))
    return section("Start and preprocessing", pairs(rows), id_="start")


def _tasks(t: Transfer) -> Html:
    """Each task's own numbers, folded: its seeds, its sweep points, how its splits were made."""
    parts = []
    for task in t.tasks:
        r = t.results.get(task)
        if r is None:
            parts.append(details(f"{task}: not done yet", para(_progress(t, task))))
            continue
        inner = []
        per_seed = r.get("test_top1_per_seed")
        if per_seed:
            inner.append(table(["seed", "test top-1"], [(s, pct(v)) for s, v in zip(r.get("seeds", []), per_seed)],
                               numeric=(0, 1)))
        if "ema_test_top1" in r:
            inner.append(para(f"EMA of the weights: {pm(r['ema_test_top1'], r.get('ema_test_top1_std'))}"))
        if r.get("sweep"):
            inner.append(table(["lr", "steps", "val top-1", "val loss", "train loss", "time"],
                               [(f"{p['lr']:g}", p["steps"], pct(p["val_top1"]), number(p.get("val_loss")),
                                 number(p.get("train_loss")), f"{p.get('seconds', 0):.1f} s") for p in r["sweep"]],
                               numeric=range(6)))
        splits = r.get("splits")
        if splits:
            inner.append(para(f"splits: {splits.get('definition', splits)}"))
        inner.append(para(f"test on {number(r.get('test_samples'))} images; test loss {number(r.get('test_loss'))}; "
                          f"{r.get('selection', '')} selection; folder {code(t.folders.get(task, t.path).name)}"))
        parts.append(details(f"{task}: {pm(r['test_top1'], r.get('test_top1_std'))}", *inner))
    return section("Each task", *parts, id_="tasks")


def _progress(t: Transfer, task: str) -> str:
    folder = t.folders.get(task)
    if folder is None:
        return "not started"
    points = len(_points_on_disk(t, task))
    finals = len(list(folder.glob("final*/final.json")))
    return f"{points} of {len(_points(t)) or '?'} sweep points and {finals} final run(s) on disk"


def suite_page(path: Path, figures: bool = True) -> str:
    """The page of the transfer in `path`. `figures`: draw each task's sweep (else the heatmap alone)."""
    t = open_transfer(path)
    state, line = _status(t)
    start = t.settings.get("start", "?")
    subtitle = (f"transfer of {start} to {len(t.tasks)} task(s) · {t.settings.get('protocol', '')} protocol · "
                f"{t.settings.get('shots', '?')} shots")
    body = [_command(t), _results(t), _published(t), _selection(t, figures), _start(t), _settings(t), _tasks(t)]
    toc = [(a, n) for a, n in (("reproduce", "Reproduce"), ("results", "Results"), ("published", "Published rows"),
                               ("selection", "Selection and sweep"), ("start", "Start"), ("settings", "Settings"),
                               ("tasks", "Each task")) if f'id="{a}"' in "".join(body)]
    name = path.resolve().name
    return document(f"{name}: transfer", banner(state, line), body, "suite", subtitle, toc)


__all__ = ["Transfer", "open_transfer", "suite_page"]
