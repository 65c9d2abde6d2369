"""The page comparing several folders (`vitx report A B ...`): pre-training runs with their curves overlaid, a
table of their last values and the settings that differ between them; or transfers with their test top-1 per
task and group means side by side. Each column is read from its own folder's files."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import VitxError
from ..plots.series import base_name, labels
from .html import Html, banner, code, command_block, data_json, document, esc, number, para, pct, pm, section, table
from .records import Run, open_run

HEADLINE = ("loss", "top1", "val_loss", "val_top1")  # shown for every run first; the others' last values follow
NOT_COMPARED = ("output_dir", "tracker_run")  # a run's own name and place: they always differ


def _differing(settings: dict[str, dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """(setting, value per folder) for each setting whose value is not the same in every folder."""
    keys = list(dict.fromkeys(k for s in settings.values() for k in s if k not in NOT_COMPARED))
    return [(k, [s.get(k, "—") for s in settings.values()]) for k in keys
            if len({json.dumps(s.get(k), sort_keys=True) for s in settings.values()}) > 1]


def _settings_section(settings: dict[str, dict[str, Any]]) -> Html:
    rows = _differing(settings)
    if not rows:
        return section("Settings that differ", para("Every recorded setting is the same."), id_="settings")
    shown = [(code(k), *(code(v if isinstance(v, str) else json.dumps(v)) for v in values)) for k, values in rows]
    return section("Settings that differ", table(["setting", *settings], shown), id_="settings")


def _metric(key: str, value: Any) -> str:
    fraction = base_name(key).endswith(("top1", "acc")) or key.startswith("monitor_")
    if isinstance(value, (int, float)) and fraction and 0 <= value <= 1:
        return pct(value)
    return number(value)


def _runs_page(paths: list[Path], names: list[str]) -> str:
    from .run import curves_figure, status

    runs: dict[str, Run] = {name: open_run(p) for name, p in zip(names, paths)}
    states = {name: status(run) for name, run in runs.items()}
    keys = [k for k in HEADLINE if any(run.last(k) for run in runs.values())]
    keys += sorted({k for run in runs.values() for r in run.records for k in r
                    if (k.startswith("monitor_") or k in ("colour_acc", "baseline_acc", "rankme_fraction"))
                    and k not in keys})
    rows, values = [], {}
    for name, run in runs.items():
        last = {k: run.last(k) for k in keys}
        speed = run.speed()
        rows.append((name, states[name][0], f"{run.step:,}" + (f" of {run.steps:,}" if run.steps else ""),
                     *(_metric(k, v[1]) if v else "—" for k, v in last.items()),
                     f"{speed['median']:,.1f}" if speed else "—"))
        values[name] = {k: v[1] for k, v in last.items() if v}
    finals = section("Last values", table(
        ["run", "state", "steps saved", *keys, "img/s (median)"], rows, numeric=range(2, len(keys) + 4),
        caption="each metric's last logged value (metrics.jsonl)", data_table="finals", data_values=data_json(values),
        class_="wide"), id_="finals")
    records = {name: run.records for name, run in runs.items() if run.records}
    curves = section("Curves", curves_figure(records, "compare-curves", ""), id_="curves") if records else ""
    commands = section("Commands", *(Html(para(Html(f"<strong>{esc(name)}</strong>")) + command_block(run.command()[0]))
                                     for name, run in runs.items()), id_="commands")
    settings = _settings_section({name: run.transfer or run.settings for name, run in runs.items()})
    running = [n for n, (state, _) in states.items() if state != "finished"]
    line = esc(f"{len(runs)} runs" + (f"; not finished: {', '.join(running)}" if running else "; all finished"))
    return document("comparison of runs", banner("running" if any(states[n][0] == "running" for n in running)
                                                 else "stopped" if running else "finished", line),
                    [finals, curves, settings, commands], "comparison", ", ".join(names),
                    [("finals", "Last values"), ("curves", "Curves"), ("settings", "Settings"), ("commands", "Commands")])


def _suites_page(paths: list[Path], names: list[str]) -> str:
    from .suite import open_transfer

    transfers = {name: open_transfer(p) for name, p in zip(names, paths)}
    tasks = list(dict.fromkeys(task for t in transfers.values() for task in t.tasks))
    rows, values = [], {name: {} for name in transfers}
    for task in tasks:
        cells = []
        for name, t in transfers.items():
            r = t.results.get(task)
            cells.append(pm(r["test_top1"], r.get("test_top1_std")) if r else "—")
            if r:
                values[name][task] = r["test_top1"]
        rows.append((task, *cells))
    marked = []
    groups = list(dict.fromkeys(g for t in transfers.values() for g in (t.summary or {}).get("group_means", {})))
    for group in groups:
        marked.append(len(rows))
        rows.append((f"mean {group}", *(pm((t.summary or {}).get("group_means", {}).get(group),
                                           (t.summary or {}).get("group_std", {}).get(group))
                                        for t in transfers.values())))
    if any((t.summary or {}).get("mean") is not None for t in transfers.values()):
        marked.append(len(rows))
        rows.append(("mean", *(pm((t.summary or {}).get("mean"), (t.summary or {}).get("std"))
                               for t in transfers.values())))
    for name, t in transfers.items():
        values[name] = {"tasks": values[name], "mean": (t.summary or {}).get("mean"),
                        "group_means": (t.summary or {}).get("group_means", {})}
    results = section("Test top-1", table(["task", *names], rows, numeric=range(1, len(names) + 1), marked=marked,
                                          caption="test top-1 per task (mean ± s.d. over seeds), group means as each "
                                                  "summary.json has them",
                                          data_table="compare-results", data_values=data_json(values)), id_="results")
    settings = _settings_section({name: t.settings for name, t in transfers.items()})
    unfinished = [name for name, t in transfers.items() if not t.complete]
    line = esc(f"{len(transfers)} transfers" + (f"; incomplete: {', '.join(unfinished)}" if unfinished else ""))
    return document("comparison of transfers", banner("incomplete" if unfinished else "finished", line),
                    [results, settings], "comparison", ", ".join(names))


def compare_page(paths: list[Path], kinds: list[str]) -> str:
    """The page comparing `paths` (all pre-training runs, or all transfers)."""
    names = labels(paths)  # (one folder named twice, however typed: refused there)
    if set(kinds) == {"run"}:
        return _runs_page(paths, names)
    if set(kinds) == {"suite"}:
        return _suites_page(paths, names)
    shown = ", ".join(f"{n} ({k})" for n, k in zip(names, kinds))
    raise VitxError(f"compare runs with runs or transfers with transfers; got {shown}")


__all__ = ["compare_page"]
