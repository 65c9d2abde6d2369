"""The page of one pre-training run (or a transfer's final run): how to make it again, what differs from the
defaults, the data and model, its curves, the monitor's probes, the collapse watch, its speed, its checkpoints
and what `--resume` and `vitx export` would do with them. Every number is read from the run's config.json and
metrics.jsonl."""
from __future__ import annotations

import json
import shlex
import statistics
from pathlib import Path
from typing import Any

from ..plots.series import LABEL_FREE, NOT_DRAWN, base_name
from ..settings.groups import SCRATCH, new_model
from .html import (Html, banner, code, command_block, data_json, details, document, esc, number, pairs, para, pct,
                   section, table, tag)
from .records import Changed, Run, held_by_another, open_run

WATCHED = (*LABEL_FREE, "rankme")  # the collapse watch's figures: their own section
FRACTIONS = ("top1", "acc")  # base names shown as percentages


def status(run: Run, given: tuple[str, str] | None = None) -> tuple[str, Html]:
    """(state, line): finished, running (another process holds the folder's lock), or stopped where it stands.
    `given`: the state the runner itself reports at its end (it knows why it stopped)."""
    steps, at, logged = run.steps, run.step, run.logged
    of = f" of {steps:,}" if steps else ""
    kept = f"last checkpoint at step {at:,}" if at else "no checkpoint yet"
    if given is not None:
        state, note = given
        if state == "finished":
            return state, esc(f"step {at:,}{of}. {note}".strip())
        return state, esc(f"at step {logged:,}{of}, {kept}: {note}")
    if held_by_another(run.path):
        return "running", esc(f"a process is writing this run now: step {logged:,}{of} logged, {kept}. This page "
                              "shows the run as it stood when the page was written.")
    if steps and at >= steps:
        return "finished", esc(f"step {at:,}{of}.")
    return "stopped", esc(f"at step {logged:,}{of} (not running now), {kept}; `--resume` continues from it.")


def _value(key: str, value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and base_name(key).endswith(FRACTIONS) \
            and 0 <= value <= 1:
        return pct(value)
    return number(value)


def _command(run: Run) -> Html:
    if not run.settings:
        return section("Reproduce", para("No config.json yet: the run has not written its first checkpoint, which "
                                         "records its settings and command."), id_="reproduce")
    line, recorded = run.command()
    how = "The command that made this run, as config.json recorded it:" if recorded else \
        "The run was started from Python; the same run from the command line (its settings that differ from the " \
        "defaults):"
    parts = [para(how), command_block(line)]
    resumed = [c for c in run.config.get("resumed_with", []) if isinstance(c, str)]
    if resumed:
        parts += [para("Continued with:"), *(command_block(c) for c in resumed)]
    changes = run.config.get("lr_changes") or []
    if changes:
        parts.append(para("Learning-rate changes on resume: " + "; ".join(
            f"step {c.get('step')}: {c.get('from')} → {c.get('to')}" for c in changes if isinstance(c, dict))))
    return section("Reproduce", *parts, id_="reproduce")


def changed_table(changed: list[Changed]) -> Html:
    if not changed:
        return para("Every setting is at its default.")
    return table(["setting", "value", "default", "what it does"],
                 [(_kept(c.name), _kept(_shown(c.value)), _kept(_shown(c.default)), c.help) for c in changed])


def _kept(text: str) -> Html:
    """A setting's name or value as code, on one line when short (`vit-nano/4` is not broken at its hyphen)."""
    return tag("code", text, class_="nowrap" if len(text) <= 24 else None)


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict, bool)) or value is None else str(value)


def _augmentation(pre: dict[str, Any], views: Any) -> str:
    """What training saw of each image, as config.json records it: the objective's views, no augmentation (a
    transfer's VTAB protocol: resized whole), or the one random resized crop."""
    if isinstance(views, list) and views:
        crops = [v for v in views if isinstance(v, dict)]
        counts = sum(c for v in crops if isinstance(c := v.get("count", 1), int))
        return f"the objective's {counts} views of each image, each cropped from the whole image (config.json: views)"
    if pre.get("augment") is False:
        return "no augmentation (each image resized whole, as evaluation sees it)"
    return (f"random resized crop scale ≥ {pre.get('crop_scale')}, flip {'on' if pre.get('hflip') else 'off'}"
            + (f", RandAugment {pre['randaugment']}" if pre.get("randaugment") else ""))


def _summary(run: Run) -> Html:
    cfg, config = run.settings, run.config
    backbone, data, pre = config.get("backbone") or {}, config.get("data") or {}, config.get("preprocess") or {}
    objective = config.get("objective") or {}
    options = ", ".join(f"{k}={v}" for k, v in (objective.get("options") or {}).items())
    shape = backbone.get("timm_kwargs") or {}
    dims = ", ".join(f"{k} {shape[k]}" for k in ("depth", "embed_dim", "num_heads", "patch_size") if k in shape)
    params = run.parameters()
    rows = [("objective", code(f"{objective.get('name', cfg.get('objective', '?'))}" + (f"({options})" if options else ""))),
            ("model", Html(f"{code(cfg.get('model', backbone.get('name', '?')))}"
                           + (f" — timm {code(backbone['timm_arch'])}" if backbone.get("timm_arch") else "")
                           + (f" ({esc(dims)})" if dims else "")
                           + (f", {params / 1e6:.2f}M parameters" if params else ""))),
            ("features evaluated", code(config.get("features", "?")))]
    if not new_model(cfg.get("start", SCRATCH)):
        rows.append(("started from", code(cfg["start"])))
    train = f", {data['train_size']:,} training images" if isinstance(data.get("train_size"), int) else ""
    rows.append(("data", Html(f"{code(data.get('spec', cfg.get('data', '?')))} ({esc(data.get('layout', '?'))}"
                              f"{esc(train)}; labels: {esc(data.get('labels', '?'))})")))
    validation = data.get("validation") or {}
    if validation:
        rows.append(("validation", f"{validation.get('images', '?')} images: {validation.get('how', '')}"))
    if pre:
        rows.append(("input", f"{pre.get('image_size')}px, mean {pre.get('mean')}, std {pre.get('std')}, "
                              f"{pre.get('interpolation')}; {_augmentation(pre, config.get('views'))}"))
    if cfg:
        rows.append(("optimisation", f"{cfg.get('optimizer')} at lr {cfg.get('lr')} ({cfg.get('schedule')} schedule, "
                                     f"{cfg.get('warmup_steps')} warm-up steps), weight decay {cfg.get('weight_decay')}, "
                                     f"batch {cfg.get('batch_size')} × {cfg.get('grad_accum')} accumulation, "
                                     f"precision {cfg.get('precision')}, seed {cfg.get('seed')}"))
    steps = run.steps
    rows.append(("steps", f"{run.step:,} saved" + (f" of {steps:,}" if steps else "")
                          + (f"; {run.logged:,} logged" if run.logged != run.step else "")))
    if run.unreadable > 1:  # (one: the line a kill tore)
        rows.append(("metrics.jsonl", f"{run.unreadable:,} lines are not metrics records and are left out"))
    transfer = run.transfer
    if transfer:
        rows.insert(0, ("transfer", f"{transfer.get('phase', '?')} run of {transfer.get('task', '?')} from "
                                    f"{transfer.get('start', '?')}"))
    return section("The run", pairs(rows), id_="run")


def _results(run: Run) -> Html:
    keys = [k for k in run.metric_keys() if k not in NOT_DRAWN and k != "lr" and not k.startswith("monitor_")
            and k not in WATCHED]
    keys = sorted(keys, key=lambda k: (base_name(k), k))
    rows = []
    for key in keys:
        first, last = run.first(key), run.last(key)
        rows.append((code(key), _value(key, first[1]), f"{first[0]:,}", _value(key, last[1]), f"{last[0]:,}"))
    if not rows:
        said = (f"metrics.jsonl holds {run.unreadable:,} line{'s' * (run.unreadable != 1)} and none is a metrics "
                "record: the file is damaged or not vitx's." if run.unreadable and not run.records
                else "Nothing logged yet.")
        return section("Results", para(said), id_="results")
    return section("Results", table(["metric", "first", "at step", "last", "at step"], rows, numeric=(1, 2, 3, 4),
                                    caption="first and last logged value of each metric (metrics.jsonl); val_: "
                                            "the validation split at each checkpoint"), id_="results")


def curves_figure(records: dict[str, list[dict[str, Any]]], name: str, title: str) -> Html:
    """vitx's curves figure (plots/curves.py: the same as curves.png) for one run or several overlaid, inline;
    its data-values: per panel, per run, per metric, the (step, value) pairs drawn."""
    from ..plots import draw
    from ..plots.series import series
    from .svg import figure, inline_svg

    svg, panels = inline_svg(lambda path: draw(records, path, title), name)
    values = [{"title": p.title, "series": {run: {k: [list(pt) for pt in zip(*series(rows, k))] for k in p.keys
                                                  if series(rows, k)[0]} for run, rows in records.items()}}
              for p in panels]
    caption = ", ".join(p.title for p in panels)
    return figure(svg, name, title or "training curves", values, f"Panels: {caption}. Step on the x axis.")


def _curves(run: Run, figures: bool) -> Html:
    if not run.records:
        return ""
    if not figures:
        return section("Curves", para("Not drawn in this page (written at a stop, or with --no-curves): ",
                                      code("vitx report " + shlex.quote(str(run.path))), " draws them."),
                       id_="curves")
    title = f"{run.path.name}: {run.settings.get('objective', '?')}, {run.settings.get('data', '?')}, step {run.logged}"
    return section("Curves", curves_figure({run.path.name: run.records}, "curves", title), id_="curves")


def _monitor(run: Run) -> Html:
    rows = [r for r in run.records if any(k.startswith("monitor_") for k in r)]
    if not rows:
        return ""
    keys = list(dict.fromkeys(k for r in rows for k in r if k.startswith("monitor_")))
    probes = run.settings.get("monitor", "")
    features = run.settings.get("monitor_features", "auto")
    body = table(["step", *(k[len("monitor_"):] for k in keys)],
                 [(f"{int(r['step']):,}", *(_monitor_value(r.get(k)) for k in keys)) for r in rows],
                 numeric=range(len(keys) + 1), caption=f"the representation monitor on {probes or 'its data'} "
                 f"(frozen features: {features}); fewshot: a closed-form linear head on k labelled images per class, "
                 "knn: weighted k-nearest neighbours; test top-1", data_values=data_json(
                     {k: [[r["step"], r[k]] for r in rows if k in r] for k in keys}), data_table="monitor")
    return section("Representation monitor", body, id_="monitor")


def _monitor_value(value: Any) -> str:
    return pct(value) if isinstance(value, (int, float)) and 0 <= value <= 1 else number(value)


def _watch(run: Run) -> Html:
    rows = [r for r in run.records if any(k in r for k in ("rankme", "feature_std"))]
    # the watch's lines as the run logged them (metrics.jsonl `watch` entries: a collapse, or a calmer head note;
    # `collapse`: the single line of runs logged before the two were told apart)
    found = [(int(r["step"]), w.get("kind", "collapse"), w.get("line", "")) for r in run.records
             for w in (r.get("watch") or []) if isinstance(w, dict)]
    found += [(int(r["step"]), "collapse", r["collapse"]) for r in run.records if isinstance(r.get("collapse"), str)]
    if not rows and not found:
        return ""
    parts: list[Any] = []
    for step, kind, line in found:
        title = "Collapse" if kind == "collapse" else "Head note"
        parts.append(para(Html(f"<strong>{title} at step {step:,}</strong>: {esc(line)}"), class_="finding"))
    if not any(kind == "collapse" for _, kind, _ in found):
        parts.append(para(f"No collapse seen in {len(rows)} check(s) (every {run.settings.get('watch_every', '?')} "
                          "steps): the label-free figures stayed above the watch's thresholds (rank 1.1, spread 0.5% "
                          "of 1/√D), two checks in a row being needed to say one."))
    keys = [k for k in ("rankme", "rankme_fraction", "feature_std") if any(k in r for r in rows)]
    if rows:
        parts.append(table(["step", *keys], [(f"{int(r['step']):,}", *(number(r.get(k)) for k in keys)) for r in rows],
                           numeric=range(len(keys) + 1),
                           caption="rankme: effective rank of the features (RankMe); rankme_fraction: of the most it "
                                   "can be; feature_std: mean per-dimension s.d. of the normalised features",
                           data_table="watch", data_values=data_json({k: [[r["step"], r[k]] for r in rows if k in r]
                                                                  for k in keys})))
    return section("Collapse watch", *parts, id_="collapse")


def _speed(run: Run) -> Html:
    speed = run.speed()
    if speed is None:
        return ""
    rows = [("images per second", f"median {speed['median']:,.1f} over {speed['logs']} log steps (lowest "
                                   f"{speed['low']:,.1f}, highest {speed['high']:,.1f})")]
    if "input_wait" in speed:
        rows.append(("input wait", f"median {speed['input_wait']:.0%} of the time between log steps, the loop "
                                   "waiting for its data loader (main process)"))
    mfu = [float(r["mfu"]) for r in run.records if isinstance(r.get("mfu"), (int, float))]
    rows.append(("model FLOPs utilisation", f"median {statistics.median(mfu):.1%} over {len(mfu)} log steps" if mfu
                 else "not recorded in metrics.jsonl"))
    skipped = run.last("skipped_nonfinite")
    if skipped:
        rows.append(("skipped updates", f"{skipped[1]:.0f} non-finite steps skipped (by step {skipped[0]:,})"))
    return section("Speed", pairs(rows), id_="speed")


def _checkpoints(run: Run) -> Html:
    found = run.checkpoints()
    path = shlex.quote(str(run.path))
    parts: list[Any] = []
    if found:
        parts.append(table(["checkpoint", "step", "size", "also holds"],
                           [(code(c["name"]), f"{c['step']:,}", f"{c['bytes'] / 1e6:,.1f} MB", ", ".join(c["extra"]))
                            for c in found], numeric=(1, 2)))
    else:
        parts.append(para("No checkpoint yet."))
    if run.transfer is None:
        latest, steps = (found[-1]["step"] if found else None), run.steps
        if latest is not None and steps and latest >= steps:
            what = (f"The run is complete at step {latest:,}: {code(f'vitx pretrain --output-dir {path} --resume')} "
                    "finds nothing to do.")
        elif latest is not None:
            what = (f"{code(f'vitx pretrain --output-dir {path} --resume')} continues from {code(found[-1]['name'])} "
                    f"(step {latest:,}{f' of {steps:,}' if steps else ''}) with the settings recorded there; "
                    "metrics logged after that step are dropped and trained again.")
        else:
            what = "With no checkpoint, --resume starts the run anew."
        parts.append(para(Html(what)))
    if found:
        extra = found[-1]["extra"]
        flags = (" --use-ema" if "EMA" in extra else "") + (" --export-teacher" if "teacher" in extra else "")
        export = f"vitx export {path} --to {shlex.quote(run.path.name + '-export')}"
        parts.append(para(Html(f"Export for timm (Hugging Face folder, model card): {code(export)}"
                               + (f"; add {code(flags.strip())} for the averaged or teacher weights" if flags else "")
                               + ".")))
    return section("Checkpoints", *parts, id_="checkpoints")


def _config(run: Run) -> Html:
    shown = dict(run.config)
    data = dict(shown.get("data") or {})
    names = data.pop("class_names", None)
    if names:
        data["class_names"] = f"{len(names)} names" if len(names) > 20 else names
    shown["data"] = data
    return details("config.json (class names shortened)", Html(f"<pre>{esc(json.dumps(shown, indent=1))}</pre>"))


def run_page(path: Path, figures: bool = True, given: tuple[str, str] | None = None) -> str:
    """The page of the run in `path`. `figures`: draw its curves (else say how to); `given`: the state the
    runner reports at its end."""
    run = open_run(path)
    state, line = status(run, given)
    cfg = run.settings
    what = "transfer run" if run.transfer else "pre-training run"
    subtitle = (f"{what} · {cfg.get('objective', '?')} on {cfg.get('model', '?')} · data {cfg.get('data', '?')} · "
                f"vitx {run.config.get('vitx_version', '?')}")
    body = [_command(run), _summary(run), _results(run), _curves(run, figures), _monitor(run), _watch(run),
            section("Settings that differ from the defaults", changed_table(run.changed()) if run.settings else
                    para("Not recorded yet (no config.json)."), id_="settings"),
            _speed(run), _checkpoints(run), section("Everything recorded", _config(run), id_="config")]
    toc = [(a, t) for a, t in (("reproduce", "Reproduce"), ("run", "The run"), ("results", "Results"),
                               ("curves", "Curves"), ("monitor", "Monitor"), ("collapse", "Collapse watch"),
                               ("settings", "Settings"), ("speed", "Speed"), ("checkpoints", "Checkpoints"))
           if f'id="{a}"' in "".join(body)]
    return document(f"{path.resolve().name}: {what}", banner(state, line), body, "run", subtitle, toc)


__all__ = ["changed_table", "curves_figure", "run_page", "status"]
