"""The GPU plan's DINO row, refitted on a GPU (not a test): variants of the row pre-trained side by side and each
transferred as the reproduction transfers, beside scratch, in one table.

    bash benchmarks/gpu_acceptance.sh --only dino-row             # on one GPU: about 7 minutes
    python benchmarks/dino_row.py --cpu-smoke --output-dir DIR    # every variant CPU-sized, in seconds (the suite)

Why: on an H200 (2026-11-28, recipes/reproduction/REPORT-GPU.md) the GPU plan's DINO row, trained as the CPU row
that learns (K 1,024, teacher temperature 0.02, DINO_SMALL's optimisation) but for 500 steps of batch 256 on
vit-ti/4 at 64px, did not learn: the teacher uniform by step 336, RankMe 3.7 → 5.5 of 192, transfer 29.4%
against scratch's 34.5%. On the CPU the row passed scratch only between 250 and 500 steps of batch 128 and was
+15 points at 1,000 (recipes/reproduction/DINO.md). The variants, each one change from the row or from the CPU
row, cheapest question first:
  b128x1000   the CPU row's 1,000 steps of batch 128: the same images as the row's 500 × 256, twice the updates
  cpu-head    the same, with the CPU row's head and crops too (hidden 256, bottleneck 64, 4 local crops)
  lr1e-3      the row's 500 × 256 at 1e-3: the CPU row's lr per image (5e-4 at batch 128)
Each runs with the representation monitor (kNN and few-shot on the digits) at a quarter of its steps, so the
collapse watch judges it by accuracy against step 0 as well as by RankMe. The runs, the pipeline's own
(`vitx.reproduce.pipeline`: the same settings, side by side as the reproduction starts them), go under
--output-dir; the table goes to dino-row.md and dino-row.json there, first with the pre-trainings alone (a run
cut by its limit still says how each pre-training went), then with the transfers (gpu_acceptance.py packs the
folder for $OUT).
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from vitx.console import make_console, say
from vitx.plots.series import read_metrics
from vitx.reproduce.claims import start_stats
from vitx.reproduce.pipeline import pretrain_rows, transfer_runs, transfer_settings
from vitx.reproduce.plan import CPU, GPU, Plan, Pretraining
from vitx.spec import parse_spec

ROW = GPU.pretrainings["dino"]  # the GPU plan's DINO row
CPU_ROW = CPU.pretrainings["dino"]  # the CPU plan's, which learns (vitx/reproduce/plan.py)


def monitored(steps: int) -> dict[str, Any]:
    """The representation monitor at a quarter of the run's steps: the watch's accuracy against step 0."""
    return {"monitor": GPU.monitor, "monitor_every": max(1, steps // 4)}


def variants() -> dict[str, Pretraining]:
    """The variants (name → pre-training), each one change from the GPU plan's DINO row or from the CPU row."""
    cpu_shape = {**ROW.settings, "batch_size": CPU.batch_size}  # the CPU row's batch (128), its steps below
    return {
        "b128x1000": replace(ROW, steps=CPU_ROW.steps, settings={**cpu_shape, **monitored(CPU_ROW.steps)}),
        # (cost: the start order only; 4 local crops instead of 6, a smaller head)
        "cpu-head": replace(ROW, objective=CPU_ROW.objective, steps=CPU_ROW.steps, cost=ROW.cost * 0.8,
                            settings={**cpu_shape, **monitored(CPU_ROW.steps)}),
        "lr1e-3": replace(ROW, lr=2 * CPU_ROW.lr, settings={**ROW.settings, **monitored(ROW.steps)}),  # per image
    }


def trial_plan(cpu_smoke: bool) -> Plan:
    """The GPU plan with the variants as its rows, trimmed as the GPU acceptance trims it (one pre-training seed, 3
    transfer seeds, one lr); with `cpu_smoke`, CPU-sized: every setting path runs, in seconds."""
    if not cpu_smoke:
        return replace(GPU, pretrainings=variants(), pretrain_seeds=[0], seeds=[0, 1, 2], transfer_lrs=[0.1],
                       curve=[], hires_seeds=0, jobs=8)
    def small(objective: str) -> str:  # a head that costs nothing, the variant's crops
        crops = parse_spec(objective)[1].get("local_crops", 6)
        return f"dino(out_dim=256,hidden_dim=32,bottleneck_dim=16,local_crops={crops})"

    smoke = {name: replace(p, objective=small(p.objective), steps=2,
                           settings={**p.settings, "monitor_every": 2, "workers": 0,
                                     **({"batch_size": 8} if "batch_size" in p.settings else {})})
             for name, p in variants().items()}
    return replace(GPU, model="vit-nano/4", image_size=16, batch_size=8, precision="no", pretrainings=smoke,
                   pretrain_seeds=[0], seeds=[0], transfer_lrs=[0.1], transfer_steps=[2], transfer_batch=16,
                   shots=40, test_samples=64, curve=[], hires_seeds=0, jobs=1)


def _first_last(records: list[dict[str, Any]], key: str) -> tuple[float | None, float | None]:
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    return (values[0], values[-1]) if values else (None, None)


def summarise(plan: Plan, runs: dict[str, Path], transfers: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per start: its pre-training's figures (loss, the teacher's entropy against log K, RankMe and the
    monitor's kNN at step 0 and at the end, the watch's findings) and, once transferred (`transfers`: start →
    its transfers' results), its transfer's mean ± s.e."""
    rows = []
    for start in ["scratch", *runs]:
        row: dict[str, Any] = {"start": start}
        if transfers.get(start):
            done = transfers[start]
            stats = start_stats(done, int(done[0].get("test_samples") or plan.test_samples))
            row.update(test_top1=stats["mean"], stderr=stats["stderr"], seeds=[r["test_top1"] for r in done])
        if start in runs:
            spec, records = plan.pretrainings[start], read_metrics(runs[start])  # (the watch's findings too)
            config = json.loads((runs[start] / "config.json").read_text())
            out_dim = (config.get("objective") or {}).get("options", {}).get("out_dim")  # K, fitted to the data
            row.update(objective=spec.objective, lr=spec.lr, steps=spec.steps_in(plan),
                       batch=spec.settings.get("batch_size", plan.batch_size),
                       loss=_first_last(records, "loss"), rankme=_first_last(records, "rankme"),
                       knn=_first_last(records, "monitor_knn"),
                       teacher_entropy=_first_last(records, "teacher_entropy")[1], out_dim=out_dim,
                       watch=[w.get("line", w.get("kind")) for r in records for w in r.get("watch", [])],
                       images_per_s=_first_last(records, "images_per_s")[1])
        rows.append(row)
    return rows


def _shown(pair: tuple[float | None, float | None], fmt: str) -> str:
    first, last = pair
    return "—" if first is None else f"{format(first, fmt)} → {format(last, fmt)}"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table, scratch first."""
    lines = ["| start | steps × batch, lr | loss | teacher entropy (end) | RankMe | monitor kNN | transfer top-1 "
             "(mean ± s.e.) | watch |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        moved = f"{r['test_top1']:.2%} ± {r['stderr']:.2%}" if "test_top1" in r else "not yet transferred"
        if r["start"] == "scratch":
            lines.append(f"| scratch | — | — | — | — | — | {moved} | — |")
            continue
        entropy = r["teacher_entropy"]
        log_k = math.log(r["out_dim"]) if r.get("out_dim") else None
        shown = "—" if entropy is None else f"{entropy:.3f}" + (f" of {log_k:.3f}" if log_k else "")
        lines.append(f"| {r['start']} | {r['steps']} × {r['batch']}, {r['lr']:g} | {_shown(r['loss'], '.3f')} | "
                     f"{shown} | {_shown(r['rankme'], '.1f')} | {_shown(r['knn'], '.1%')} | "
                     f"{moved} | {'; '.join(r['watch']) or 'nothing said'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Pre-train the variants side by side, write their rows, transfer each (and scratch), write the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output-dir", default="runs/gpu-acceptance/dino-row")
    ap.add_argument("--cpu-smoke", action="store_true", help="every variant CPU-sized, in seconds")
    args = ap.parse_args(argv)
    out, plan, console = Path(args.output_dir), trial_plan(args.cpu_smoke), make_console()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where the folder should be, or above it
        raise SystemExit(f"error: --output-dir {out}: {exc.strerror.lower()}") from None
    jobs = {name: (name, 0, out / f"pretrain-{name}") for name in plan.pretrainings}
    pretrain_rows(plan, jobs, console)
    runs = {name: run for name, (_, _, run) in jobs.items()}
    write(out, summarise(plan, runs, {}))  # the pre-trainings' figures, before the transfers
    starts = {"scratch": "scratch", **{name: str(run) for name, (_, _, run) in jobs.items()}}
    settings = {f"{start}-seed{seed}": transfer_settings(plan, where, out / "transfer" / f"{start}-seed{seed}", seed)
                for start, where in starts.items() for seed in plan.seeds}
    done = transfer_runs(settings, plan.jobs, console)
    transfers = {start: [done[f"{start}-seed{seed}"] for seed in plan.seeds] for start in starts}
    rows = summarise(plan, runs, transfers)
    write(out, rows)
    say(console, table(rows))
    return rows


def write(out: Path, rows: list[dict[str, Any]]) -> None:
    """dino-row.json and dino-row.md: the rows as they stand."""
    (out / "dino-row.json").write_text(json.dumps(rows, indent=1))
    (out / "dino-row.md").write_text(table(rows))


if __name__ == "__main__":
    main()
