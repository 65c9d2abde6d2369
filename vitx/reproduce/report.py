"""REPORT.md from the reproduction's results: a summary table of the claims, then each claim's numbers and
figures, the settings, and the command."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..safe_io import atomic_write_text
from ..plots import COMPUTE, draw_compute, try_draw
from .claims import INSPECTION_CLAIMS, mean_top1, start_stats, test_count


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _measured(c: dict[str, Any]) -> str:
    n = c["numbers"]
    if c["id"] == "mpp":
        return (f"scratch {_pct(n['scratch_top1'])}, MPP {_pct(n['mpp_top1'])}, supervised "
                f"{_pct(n['supervised_top1'])}; MPP − scratch {100 * n['gap']:+.2f} ± {100 * n['gap_stderr']:.2f} points")
    if c["id"].startswith("posemb-"):
        trained = c["id"].split("-", 1)[1]
        return (f"nearest patch in own row/column: init {n['init_nearest_in_row_or_column']:.0%}, trained "
                f"{n[f'{trained}_nearest_in_row_or_column']:.0%}; similarity–distance correlation: init "
                f"{n['init_distance_correlation']:.2f}, trained {n[f'{trained}_distance_correlation']:.2f}")
    if c["id"] == "distance":
        means = ", ".join(f"{m:.1f}" for m in n["layer_means"])
        return f"layer-1 heads {n['layer1_min']:.1f}–{n['layer1_max']:.1f}px (uniform {n['uniform']:.1f}); means by layer {means}"
    return f"{_pct(n['low_top1'])} → {_pct(n['high_top1'])} (± {_pct(n['stderr'])})"


def _stats(results: dict[str, Any], start: str) -> dict[str, Any]:
    """A start's mean ± s.e. as the pipeline recorded it (results.json's summary), or computed the same way for a
    results.json from before the summary."""
    table = results["compute"] if "@" in start else results["transfer"]
    return results.get("summary", {}).get(start) or start_stats(table[start], test_count(results))


def _transfer_table(results: dict[str, Any]) -> list[str]:
    """One row per start: each pre-training's mean over the transfer seeds, the mean over pre-trainings ± the s.e.
    between them, and the within-pre-training s.e. beside it."""
    plan = results["plan"]
    lines = [f"| start | per pre-training (mean of {len(plan['seeds'])} transfer seeds) | mean ± s.e. | s.e. level | "
             "within a pre-training (s.e. over transfer seeds) | chosen lr × steps |", "|---|---|---|---|---|---|"]
    for name, runs in results["transfer"].items():
        st = _stats(results, name)
        per = ", ".join(f"p{s}: {_pct(m)}" if s is not None else _pct(m)
                        for s, m in zip(st["pretrain_seeds"], st["per_pretraining"]))
        chosen = sorted({f"{r['chosen']['lr']:g} × {r['chosen']['steps']}" for r in runs})
        level = (f"{len(st['per_pretraining'])} pre-trainings" if st["level"] == "pre-training"
                 else f"{len(runs)} transfer seeds")
        lines.append(f"| {name} | {per} | {_pct(st['mean'])} ± {_pct(st['stderr'])} | {level} | "
                     f"± {_pct(st['within_stderr'])} | {', '.join(chosen)} |")
    return lines


def _seed_table(results: dict[str, Any]) -> list[str]:
    """Every transfer's test top-1, by start and pre-training seed, one column per transfer seed."""
    seeds = results["plan"]["seeds"]
    lines = ["| start | pre-training seed | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---" * (len(seeds) + 2) + "|"]
    for name, runs in results["transfer"].items():
        groups: dict[Any, list[float]] = {}
        for r in runs:
            groups.setdefault(r.get("pretrain_seed"), []).append(r["test_top1"])
        for pretrain_seed, accs in groups.items():
            lines.append(f"| {name} | {'—' if pretrain_seed is None else pretrain_seed} | "
                         + " | ".join(_pct(a) for a in accs) + " |")
    return lines


def _curve_points(results: dict[str, Any]) -> dict[str, list[tuple[int, str]]]:
    """Each curve objective's (pre-training steps, start in the results) in step order: its part-way
    checkpoints ("mpp@500"), then its end ("mpp")."""
    points: dict[str, list[tuple[int, str]]] = {
        name: [] for name in results["plan"].get("curve", ["mpp"]) if name in results["transfer"]}
    for key in results["compute"]:
        name, step = key.split("@")
        points.setdefault(name, []).append((int(step), key))
    for name, rows in points.items():
        end = results["pretrain"][name].get("steps", results["plan"]["pretrain_steps"])
        rows.append((end, name))
        rows.sort(key=lambda row: row[0])
    return points


def _minutes(results: dict[str, Any], name: str, steps: int) -> float | None:
    """Minutes of pre-training `name` to `steps` on this machine, from its measured speed (None when unrecorded)."""
    speed = results["pretrain"][name].get("images_per_s")
    return steps * results["plan"]["batch_size"] / speed / 60 if speed else None


def _compute_table(results: dict[str, Any]) -> list[str]:
    """Each curve objective's transfer accuracy against its pre-training steps and time, with the gap to scratch
    (each point's mean ± s.e. over its pre-training seeds, as the transfer table's)."""
    plan = results["plan"]
    base = _stats(results, "scratch")
    lines = ["| start | pre-training steps | images seen | minutes here | test top-1 | − scratch (points) |",
             "|---|---|---|---|---|---|",
             f"| scratch | 0 | 0 | 0 | {_pct(base['mean'])} ± {_pct(base['stderr'])} | — |"]
    for name, rows in _curve_points(results).items():
        for steps, start in rows:
            st = _stats(results, start)
            minutes = _minutes(results, name, steps)
            lines.append(f"| {name} | {steps} | {steps * plan['batch_size']:,} | "
                         f"{'—' if minutes is None else f'{minutes:.1f}'} | {_pct(st['mean'])} ± {_pct(st['stderr'])} | "
                         f"{100 * (st['mean'] - base['mean']):+.2f} ± "
                         f"{100 * (st['stderr'] ** 2 + base['stderr'] ** 2) ** 0.5:.2f} |")
    return lines


def _draw_compute(results: dict[str, Any], path: Path, warn: Callable[[str], None]) -> bool:
    """compute.png beside the report: each curve objective's accuracy against its pre-training minutes here
    (steps where a speed is unrecorded), scratch as a band. False when it could not be drawn (said by `warn`)."""
    points = _curve_points(results)
    timed = all(_minutes(results, name, 1) is not None for name in points)
    curves = {name: [(_minutes(results, name, steps) if timed else steps, _stats(results, start)["mean"],
                      _stats(results, start)["stderr"]) for steps, start in rows] for name, rows in points.items()}
    scratch = _stats(results, "scratch")
    return try_draw(COMPUTE, draw_compute, curves, (scratch["mean"], scratch["stderr"]), path,
                    xlabel="pre-training minutes (this machine)" if timed else "pre-training steps",
                    warn=warn) is not None


def _steps(results: dict[str, Any]) -> str:
    """'1500 steps' when every pre-training ran as long, else each one's."""
    steps = {name: r.get("steps", results["plan"]["pretrain_steps"]) for name, r in results["pretrain"].items()}
    if len(set(steps.values())) == 1:
        return f"{next(iter(steps.values()))} steps"
    return ", ".join(f"{name} {n} steps" for name, n in steps.items())


MONITOR_FEATURES = {
    "pre-logits": "the pre-logits, which for MPP (no representation layer) are the [class] token after the final norm",
    "cls-token": "the [class] token after the final norm",
    "backbone": "the [class] token after the final norm",  # cls-token's former name, in older results.json
    "patch-mean": "the mean of the patch tokens after the final norm, which MPP trains (it never trains the "
                  "[class] token)",
}


def _monitor_table(results: dict[str, Any]) -> list[str]:
    rows = [r for r in results["pretrain"]["mpp"].get("monitor", []) if "monitor_knn" in r]
    if not rows:
        return []
    shots = sorted({k for r in rows for k in r if k.startswith("monitor_fewshot_")},
                   key=lambda k: int(k.split("_")[2][:-4]))
    head = " | ".join(k.split("_")[2].replace("shot", "-shot") for k in shots)
    features = MONITOR_FEATURES.get(results["plan"].get("monitor_features", "pre-logits"), "")
    lines = [f"The representation monitor during MPP pre-training (`{results['plan']['monitor']}`, frozen "
             f"features: {features}; few-shot is the closed-form linear head of `vitx eval fewshot`, kNN the "
             "weighted 20-NN):", "",
             f"| step | {head} | kNN |", "|---" * (len(shots) + 2) + "|"]
    for r in rows:
        lines.append(f"| {r['step']} | " + " | ".join(_pct(r[k]) for k in shots) + f" | {_pct(r['monitor_knn'])} |")
    return lines + [""]


def _other_objectives(results: dict[str, Any]) -> list[str]:
    skipped = [k for k in results["plan"]["pretrainings"] if k not in results["pretrain"]]
    lines = []
    for name in ("mae", "simclr", "dino"):
        if name in results["pretrain"]:
            r = results["pretrain"][name]
            runs = r.get("runs") or {"0": {"loss_first": r["first"]["loss"], "loss_last": r["last"]["loss"],
                                           "seconds": r["seconds"]}}
            each = "; ".join(f"seed {seed}: {v['loss_first']:.3f} → {v['loss_last']:.3f} ({v['seconds'] / 60:.1f} min)"
                             for seed, v in runs.items())
            lines.append(f"- `{results['plan']['pretrainings'][name]['objective']}`, "
                         f"{r.get('steps', results['plan']['pretrain_steps'])} steps, loss by pre-training seed: "
                         f"{each}.")
    if skipped:
        lines.append(f"- Not run here (plugin not installed): {', '.join(skipped)}.")
    return lines


def _position_table(results: dict[str, Any]) -> list[str]:
    lines = ["| backbone | nearest in own row/column | similarity–distance correlation | same row/column − neither |",
             "|---|---|---|---|"]
    for name in ("init", "supervised", "mpp"):
        p = results["inspect"][name]["position_similarity"]
        lines.append(f"| {name} | {p['nearest_in_row_or_column']:.0%} (chance {p['nearest_in_row_or_column_chance']:.0%}) "
                     f"| {p['distance_correlation']:.2f} | {p['row_column_gap']:.3f} |")
    return lines


def _distance_table(results: dict[str, Any]) -> list[str]:
    lines = ["| layer | " + " | ".join(f"{n}: heads (px)" for n in ("init", "supervised", "mpp")) + " |",
             "|---|---|---|---|"]
    depth = len(results["inspect"]["supervised"]["attention_distance"]["pixels"])
    for layer in range(depth):
        cells = [", ".join(f"{d:.1f}" for d in results["inspect"][n]["attention_distance"]["pixels"][layer])
                 for n in ("init", "supervised", "mpp")]
        lines.append(f"| {layer + 1} | " + " | ".join(cells) + " |")
    return lines


def _summary(results: dict[str, Any], path: Path) -> list[str]:
    """The command, what was trained, and the claims table with each claim's criterion."""
    plan, claims, machine = results["plan"], results["claims"], results["machine"]
    held = sum(c["holds"] for c in claims)
    partial = results.get("partial")
    threads = (f"{machine['processes']} processes side by side, {machine['threads_per_process']} CPU thread(s) each"
               if machine.get("processes", 1) > 1 else f"{machine['cores']} CPU threads")
    pretrain_seeds = plan.get("pretrain_seeds", [0])
    return [
        "# vitx: the ViT paper's findings at small scale",
        "",
        f"Command: `vitx reproduce --plan {plan.get('name', 'cpu')} --output-dir {path.parent}` · {results['seconds'] / 60:.1f} minutes"
        f"{' (this call; it reused the runs an earlier call finished)' if results.get('resumed') else ''} on "
        f"{threads}{' and ' + machine['gpu'] if machine['gpu'] else ''} · vitx {machine['vitx']}, "
        f"torch {machine['torch']}.",
        "",
        f"Everything is trained here, offline: {plan['model']} at {plan['image_size']}px, pre-trained "
        f"({_steps(results)}, batch {plan['batch_size']}) on `{plan['data']}`, then transferred to `{plan['task']}` "
        f"with {plan['shots']} labelled images. Pre-trainings: {', '.join(results['pretrain'])}, each with "
        f"pre-training seed{'s' if len(pretrain_seeds) > 1 else ''} {', '.join(map(str, pretrain_seeds))}; each "
        f"pre-training is transferred with seeds {', '.join(map(str, plan['seeds']))}. "
        f"**{held} of {len(claims)} claims {'judged so far ' if partial else ''}reproduce.**",
        "",
        *([f"> **Partial report**: {partial}. The claims {', '.join(INSPECTION_CLAIMS)} are not judged.", ""]
          if partial else []),
        *([plan["setting"], ""] if plan.get("setting") else []),
        "| claim | paper | measured here | reproduces |",
        "|---|---|---|---|",
        *[f"| {c['claim']} | {c['paper']} | {_measured(c)} | {'yes' if c['holds'] else '**no**'} |" for c in claims],
        "",
        "Each claim's criterion is in code (`vitx/reproduce/claims.py`):",
        "",
        *[f"- **{c['id']}**: {c['criterion']}." for c in claims],
        "",
    ]


def _transfer_section(results: dict[str, Any], figure: bool) -> list[str]:
    """Section 1: the pre-trainings, the low-data transfer from each, and the compute curve."""
    plan, pre = results["plan"], results["pretrain"]
    sup_val = pre["supervised"]["val"].get("val_top1")
    mpp_first, mpp_last = pre["mpp"]["first"], pre["mpp"]["last"]
    protocol = (f"Transfer: the paper's protocol at small size (SGD with momentum, batch {plan['transfer_batch']}). "
                f"Sweep lr {plan['transfer_lrs']} × {plan['transfer_steps']} steps on {plan['shots'] * 4 // 5} train "
                f"images, pick on {plan['shots'] // 5} validation images, retrain on all {plan['shots']}, then test on "
                f"{test_count(results)} images." if len(plan['transfer_lrs']) * len(plan['transfer_steps']) > 1 else
                f"Transfer: fine-tuning with SGD and momentum at one setting (lr {plan['transfer_lrs'][0]}, "
                f"{plan['transfer_steps'][0]} steps of batch {plan['transfer_batch']}; no sweep: one setting for every "
                f"start) on {plan['shots']} labelled images, then test on {test_count(results)} images.")
    return [
        "## 1. Pre-training and low-data transfer",
        "",
        f"Supervised pre-training reached {_pct(sup_val) if sup_val is not None else 'n/a'} validation top-1 "
        f"(10 classes). Masked patch prediction (`{plan['pretrainings']['mpp']['objective']}`) went from loss "
        f"{mpp_first['loss']:.2f} to {mpp_last['loss']:.2f}. Over the same steps, its corrupted-patch colour accuracy "
        f"went from {_pct(mpp_first.get('colour_acc', 0))} to {_pct(mpp_last.get('colour_acc', 0))}. Always guessing "
        f"the most frequent colour scores {_pct(mpp_last.get('baseline_acc', 0))}. (The first pre-training seed's "
        "run; every run's losses are in results.json.)",
        "",
        protocol + " Chance is 10%. A row's mean is the mean over its pre-trainings of each one's mean over the "
        "transfer seeds; its ± is the standard error between pre-trainings (what a repetition of the whole row "
        "moves by), never below the test set's binomial error; the within-pre-training ± (the transfer seeds' "
        "spread alone) is beside it. Scratch has no pre-training: its ± is over the transfer seeds.",
        "",
        *_transfer_table(results),
        "",
        "Every transfer:",
        "",
        *_seed_table(results),
        "",
        "### Against pre-training compute",
        "",
        "The same transfer from checkpoints part-way through each pre-training (checkpoints of one run, whose "
        "learning rate has not yet decayed; every pre-training seed's), beside training from scratch: whether, and "
        "where, each objective starts to pay off, and at what cost here (minutes from each pre-training's "
        "measured speed on this machine).",
        "",
        *_compute_table(results),
        "",
        *(["![](compute.png)", ""] if figure else []),
        *_monitor_table(results),
        *(["Other self-supervised objectives (plugins), transferred above on the same protocol:", "",
           *_other_objectives(results), ""] if _other_objectives(results) else []),
    ]


def _hires_table(results: dict[str, Any]) -> list[str]:
    """Each seed's supervised transfer at the pre-training resolution beside its fine-tuning at the higher one
    (the first pre-training seed's runs, the ones fine-tuned at both)."""
    plan = results["plan"]
    first = plan.get("pretrain_seeds", [0])[0]
    low = [r for r in results["transfer"]["supervised"] if r.get("pretrain_seed", first) == first]
    return [f"| seed | {plan['image_size']}px | {plan['hires']}px |", "|---|---|---|",
            *[f"| {s} | {_pct(r['test_top1'])} | {_pct(results['hires'][str(s)]['test_top1'])} |"
              for s, r in zip(plan["seeds"], low) if str(s) in results["hires"]]]


def _not_inspected(results: dict[str, Any]) -> list[str]:
    """Sections 2-4 of a reproduction stopped before its inspection: what it did not measure, and the
    higher-resolution runs it finished."""
    plan = results["plan"]
    first = plan.get("pretrain_seeds", [0])[0]
    lines = ["## 2-3. Position embeddings and attention distance: not measured", "",
             f"This reproduction stopped before it inspected the backbones ({results['partial']}), so the claims "
             f"{', '.join(INSPECTION_CLAIMS)} are not judged here; the same command again runs what is missing.", ""]
    if results.get("hires"):
        lines += ["## 4. Fine-tuning at a higher resolution", "",
                  f"The supervised checkpoint (pre-training seed {first}) fine-tuned at {plan['hires']}px with "
                  f"interpolated position embeddings, at the lr and steps its {plan['image_size']}px run chose.", "",
                  *_hires_table(results), ""]
    return lines


def _inspection_sections(results: dict[str, Any]) -> list[str]:
    """Sections 2-4 and the other figures: position embeddings, attention distance, the higher resolution."""
    if not results.get("inspect"):
        return _not_inspected(results)
    plan = results["plan"]
    grid = results["inspect"]["supervised"]["grid"]
    first = plan.get("pretrain_seeds", [0])[0]
    return [
        "## 2. Position embeddings",
        "",
        "Cosine similarity between the position embedding of each patch and every other patch (the first "
        "pre-training seed's runs). The table gives the share of patches whose most similar patch lies in their "
        "own row or column, and the correlation between similarity and grid distance.",
        "",
        *_position_table(results),
        "",
        "| at initialisation | after supervised pre-training | after MPP |",
        "|---|---|---|",
        "| ![](inspect/init/position_similarity.png) | ![](inspect/supervised/position_similarity.png) "
        "| ![](inspect/mpp/position_similarity.png) |",
        "",
        "## 3. Mean attention distance",
        "",
        f"For each head: the attention-weighted pixel distance between query and key patches, averaged over "
        f"{plan['attention_images']} images. A head that attends uniformly scores "
        f"{results['inspect']['supervised']['attention_distance']['uniform']:.1f}px on this grid.",
        "",
        *_distance_table(results),
        "",
        "| at initialisation | after supervised pre-training | after MPP |",
        "|---|---|---|",
        "| ![](inspect/init/attention_distance.png) | ![](inspect/supervised/attention_distance.png) "
        "| ![](inspect/mpp/attention_distance.png) |",
        "",
        "## 4. Fine-tuning at a higher resolution",
        "",
        f"The supervised checkpoint (pre-training seed {first}) is fine-tuned at {plan['hires']}px, with its "
        f"{grid[0]}×{grid[1]} position embeddings interpolated to {grid[0] * plan['hires'] // plan['image_size']}×"
        f"{grid[1] * plan['hires'] // plan['image_size']}. It uses the lr and steps that the "
        f"{plan['image_size']}px run chose on validation.",
        "",
        *_hires_table(results),
        "",
        "## Also inspected",
        "",
        "| embedding filters (supervised) | attention rollout (supervised) |",
        "|---|---|",
        "| ![](inspect/supervised/embedding_filters.png) | ![](inspect/supervised/attention_rollout.png) |",
        "",
    ]


def _closing(results: dict[str, Any]) -> list[str]:
    """What did not reproduce, and the plan's settings."""
    plan, claims = results["plan"], results["claims"]
    failed = [f"- **{c['claim']}**: {_measured(c)}. Criterion: {c['criterion']}." for c in claims if not c["holds"]]
    lines = ["## What did not reproduce", "", *(failed or ["Every claim held at this scale."])]
    if failed:
        lines += ["", f"This is a {plan['model']} model trained for minutes on small data; the paper's findings "
                      "are for 86M-632M-parameter models trained for days on millions of images. A claim that does "
                      "not hold here is reported as it was measured, not tuned until it did."]
    return lines + ["", "## Settings", "", "| setting | value |", "|---|---|",
                    *[f"| {k} | `{v}` |" for k, v in plan.items() if k != "setting"], "",
                    "All numbers are in `results.json` beside this report; each run directory holds its metrics and "
                    "checkpoint.", ""]


def write_report(results: dict[str, Any], path: Path, warn: Callable[[str], None] = print) -> Path:
    """REPORT.md, and compute.png beside it."""
    figure = _draw_compute(results, path.parent / COMPUTE, warn) if results["compute"] else False
    lines = [*_summary(results, path), *_transfer_section(results, figure), *_inspection_sections(results),
             *_closing(results)]
    atomic_write_text(path, "\n".join(lines))
    return path


__all__ = ["write_report"]
