"""REPORT.md from the reproduction's results: a summary table of the claims, then each claim's numbers and
figures, the settings, and the command."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..checkpoint import atomic_write_text
from ..plots import COMPUTE, draw_compute, try_draw
from .claims import mean_top1, start_stderr, test_count


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


def _transfer_table(results: dict[str, Any]) -> list[str]:
    seeds, n = results["plan"]["seeds"], test_count(results)
    lines = ["| start | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± s.e. | chosen lr × steps |",
             "|---" * (len(seeds) + 3) + "|"]
    for name, runs in results["transfer"].items():
        accs = [r["test_top1"] for r in runs]
        chosen = ", ".join(f"{r['chosen']['lr']:g} × {r['chosen']['steps']}" for r in runs)
        lines.append(f"| {name} | " + " | ".join(_pct(a) for a in accs) +
                     f" | {_pct(mean_top1(runs))} ± {_pct(start_stderr(runs, n))} | {chosen} |")
    return lines


def _curve_points(results: dict[str, Any]) -> dict[str, list[tuple[int, list[dict[str, Any]]]]]:
    """Each curve objective's (pre-training steps, transfer runs) in step order: its part-way checkpoints, then
    its end."""
    points: dict[str, list[tuple[int, list[dict[str, Any]]]]] = {
        name: [] for name in results["plan"].get("curve", ["mpp"]) if name in results["transfer"]}
    for key, runs in results["compute"].items():
        name, step = key.split("@")
        points.setdefault(name, []).append((int(step), runs))
    for name, rows in points.items():
        end = results["pretrain"][name].get("steps", results["plan"]["pretrain_steps"])
        rows.append((end, results["transfer"][name]))
        rows.sort(key=lambda row: row[0])
    return points


def _minutes(results: dict[str, Any], name: str, steps: int) -> float | None:
    """Minutes of pre-training `name` to `steps` on this machine, from its measured speed (None when unrecorded)."""
    speed = results["pretrain"][name].get("images_per_s")
    return steps * results["plan"]["batch_size"] / speed / 60 if speed else None


def _compute_table(results: dict[str, Any]) -> list[str]:
    """Each curve objective's transfer accuracy against its pre-training steps and time, with the gap to scratch."""
    plan, n = results["plan"], test_count(results)
    scratch = results["transfer"]["scratch"]
    base, base_se = mean_top1(scratch), start_stderr(scratch, n)
    lines = ["| start | pre-training steps | images seen | minutes here | test top-1 | − scratch (points) |",
             "|---|---|---|---|---|---|", f"| scratch | 0 | 0 | 0 | {_pct(base)} ± {_pct(base_se)} | — |"]
    for name, rows in _curve_points(results).items():
        for steps, runs in rows:
            mean, se = mean_top1(runs), start_stderr(runs, n)
            minutes = _minutes(results, name, steps)
            lines.append(f"| {name} | {steps} | {steps * plan['batch_size']:,} | "
                         f"{'—' if minutes is None else f'{minutes:.1f}'} | {_pct(mean)} ± {_pct(se)} | "
                         f"{100 * (mean - base):+.2f} ± {100 * (se ** 2 + base_se ** 2) ** 0.5:.2f} |")
    return lines


def _draw_compute(results: dict[str, Any], path: Path, warn: Callable[[str], None]) -> bool:
    """compute.png beside the report: each curve objective's accuracy against its pre-training minutes here
    (steps where a speed is unrecorded), scratch as a band. False when it could not be drawn (said by `warn`)."""
    n, points = test_count(results), _curve_points(results)
    timed = all(_minutes(results, name, 1) is not None for name in points)
    curves = {name: [(_minutes(results, name, steps) if timed else steps, mean_top1(runs), start_stderr(runs, n))
                     for steps, runs in rows] for name, rows in points.items()}
    scratch = results["transfer"]["scratch"]
    return try_draw(COMPUTE, draw_compute, curves, (mean_top1(scratch), start_stderr(scratch, n)), path,
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
            lines.append(f"- `{results['plan']['pretrainings'][name]['objective']}`: loss {r['first']['loss']:.3f} → "
                         f"{r['last']['loss']:.3f} over {r.get('steps', results['plan']['pretrain_steps'])} steps "
                         f"({r['seconds']:.0f} s).")
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


def write_report(results: dict[str, Any], path: Path, warn: Callable[[str], None] = print) -> Path:
    """REPORT.md, and compute.png beside it."""
    plan, claims = results["plan"], results["claims"]
    figure = _draw_compute(results, path.parent / COMPUTE, warn) if results["compute"] else False
    pre = results["pretrain"]
    sup_val = pre["supervised"]["val"].get("val_top1")
    mpp_first, mpp_last = pre["mpp"]["first"], pre["mpp"]["last"]
    machine = results["machine"]
    held = sum(c["holds"] for c in claims)
    grid = results["inspect"]["supervised"]["grid"]
    lines = [
        "# vitx: the ViT paper's findings at small scale",
        "",
        f"Command: `vitx reproduce --plan {plan.get('name', 'cpu')} --output-dir {path.parent}` · {results['seconds'] / 60:.1f} minutes"
        f"{' (this call; it reused the runs an earlier call finished)' if results.get('resumed') else ''} on "
        f"{machine['cores']} CPU threads{' and ' + machine['gpu'] if machine['gpu'] else ''} · vitx {machine['vitx']}, "
        f"torch {machine['torch']}.",
        "",
        f"Everything is trained here, offline: {plan['model']} at {plan['image_size']}px, pre-trained "
        f"({_steps(results)}, batch {plan['batch_size']}) on `{plan['data']}`, then transferred to `{plan['task']}` "
        f"with {plan['shots']} labelled images. Pre-trainings: {', '.join(results['pretrain'])}. The pre-training "
        f"uses seed 0; each transfer uses seeds {', '.join(map(str, plan['seeds']))}. "
        f"**{held} of {len(claims)} claims reproduce.**",
        "",
        *([plan["setting"], ""] if plan.get("setting") else []),
        "| claim | paper | measured here | reproduces |",
        "|---|---|---|---|",
        *[f"| {c['claim']} | {c['paper']} | {_measured(c)} | {'yes' if c['holds'] else '**no**'} |" for c in claims],
        "",
        "Each claim's criterion is in code (`vitx/reproduce/claims.py`):",
        "",
        *[f"- **{c['id']}**: {c['criterion']}." for c in claims],
        "",
        "## 1. Pre-training and low-data transfer",
        "",
        f"Supervised pre-training reached {_pct(sup_val) if sup_val is not None else 'n/a'} validation top-1 "
        f"(10 classes). Masked patch prediction (`{plan['pretrainings']['mpp']['objective']}`) went from loss {mpp_first['loss']:.2f} to "
        f"{mpp_last['loss']:.2f}. Over the same steps, its corrupted-patch colour accuracy went from "
        f"{_pct(mpp_first.get('colour_acc', 0))} to {_pct(mpp_last.get('colour_acc', 0))}. Always guessing the most "
        f"frequent colour scores {_pct(mpp_last.get('baseline_acc', 0))}.",
        "",
        (f"Transfer: the paper's protocol at small size (SGD with momentum, batch {plan['transfer_batch']}). "
         f"Sweep lr {plan['transfer_lrs']} × {plan['transfer_steps']} steps on {plan['shots'] * 4 // 5} train "
         f"images, pick on {plan['shots'] // 5} validation images, retrain on all {plan['shots']}, then test on "
         f"{test_count(results)} images." if len(plan['transfer_lrs']) * len(plan['transfer_steps']) > 1 else
         f"Transfer: fine-tuning with SGD and momentum at one setting (lr {plan['transfer_lrs'][0]}, "
         f"{plan['transfer_steps'][0]} steps of batch {plan['transfer_batch']}; no sweep: one setting for every start) on "
         f"{plan['shots']} labelled images, then test on {test_count(results)} images.") +
        " Chance is 10%. The standard error of a mean is the spread over the transfer seeds, never below the test "
        "set's binomial error.",
        "",
        *_transfer_table(results),
        "",
        "### Against pre-training compute",
        "",
        "The same transfer from checkpoints part-way through each pre-training (checkpoints of one run, whose "
        "learning rate has not yet decayed), beside training from scratch: whether, and "
        "where, each objective starts to pay off, and at what cost here (minutes from each pre-training's "
        "measured speed on this machine).",
        "",
        *_compute_table(results),
        "",
        *(["![](compute.png)", ""] if figure else []),
        *_monitor_table(results),
        *(["Other self-supervised objectives (plugins), transferred above on the same protocol:", "",
           *_other_objectives(results), ""] if _other_objectives(results) else []),
        "## 2. Position embeddings",
        "",
        "Cosine similarity between the position embedding of each patch and every other patch. The table gives "
        "the share of patches whose most similar patch lies in their own row or column, and the correlation "
        "between similarity and grid distance.",
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
        f"The supervised checkpoint is fine-tuned at {plan['hires']}px, with its {grid[0]}×{grid[1]} position "
        f"embeddings interpolated to {grid[0] * plan['hires'] // plan['image_size']}×"
        f"{grid[1] * plan['hires'] // plan['image_size']}. It uses the lr and steps that the "
        f"{plan['image_size']}px run chose on validation.",
        "",
        f"| seed | {plan['image_size']}px | {plan['hires']}px |",
        "|---|---|---|",
        *[f"| {s} | {_pct(low['test_top1'])} | {_pct(results['hires'][str(s)]['test_top1'])} |"
          for s, low in zip(plan["seeds"], results["transfer"]["supervised"]) if str(s) in results["hires"]],
        "",
        "## Also inspected",
        "",
        "| embedding filters (supervised) | attention rollout (supervised) |",
        "|---|---|",
        "| ![](inspect/supervised/embedding_filters.png) | ![](inspect/supervised/attention_rollout.png) |",
        "",
        "## What did not reproduce",
        "",
    ]
    failed = [f"- **{c['claim']}**: {_measured(c)}. Criterion: {c['criterion']}." for c in claims if not c["holds"]]
    lines += failed or ["Every claim held at this scale."]
    if failed:
        lines += ["", f"This is a {plan['model']} model trained for minutes on small data; the paper's findings "
                      "are for 86M-632M-parameter models trained for days on millions of images. A claim that does "
                      "not hold here is reported as it was measured, not tuned until it did."]
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|",
              *[f"| {k} | `{v}` |" for k, v in plan.items() if k != "setting"], "",
              "All numbers are in `results.json` beside this report; each run directory holds its metrics and "
              "checkpoint.", ""]
    atomic_write_text(path, "\n".join(lines))
    return path


__all__ = ["write_report"]
