"""The small-scale reproduction, run end to end: pre-train (supervised, MPP, and MAE, SimCLR and DINO when their
plugins are installed), transfer (from scratch, from each pre-training, from MPP part-way; then at a higher
resolution), inspect, judge, report. Every step resumes: a finished run is kept,
so a second call after a crash only does what is missing."""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from .. import __version__
from ..analysis import inspect_backbone
from ..backbones import create_backbone
from ..checkpoint import atomic_write_text, read_json_object
from ..runs.folder import load_backbone
from ..plots.series import read_metrics
from ..runner import pretrain
from ..runner.launch import process_device
from ..runner.reporting import make_console
from ..runs.rundir import RunDir
from ..transfer import TransferConfig, transfer
from ..transfer.jobs import cores, start_transfer, write_recipe
from .claims import judge
from ..errors import VitxError
from ..spec import parse_spec
from .plan import CPU, Plan, Pretraining
from .report import write_report


def _speed(trained: list[dict[str, Any]]) -> float | None:
    """The pre-training's cost on this machine, in images/s: each log step's speed weighted by the steps it covers
    (a checkpoint's short interval counts for its few steps), so a resumed run's too."""
    steps = seconds = 0.0
    for before, row in zip([{"step": 0}, *trained], trained):
        if row.get("images_per_s") and row["step"] > before["step"]:
            steps += row["step"] - before["step"]
            seconds += (row["step"] - before["step"]) / row["images_per_s"]
    return steps / seconds if seconds else None


def _last_metrics(run: Path) -> dict[str, Any]:
    rows = read_metrics(run)
    trained = [r for r in rows if "loss" in r]
    first, last = trained[0], trained[-1]
    return {"first": first, "last": last, "val": next((r for r in reversed(rows) if "val_loss" in r), {}),
            "images_per_s": _speed(trained),
            "monitor": [{k: v for k, v in r.items() if k == "step" or k.startswith("monitor_")}
                        for r in rows if "monitor_knn" in r]}


def _pretrain(plan: Plan, name: str, run: Path, console: Console) -> dict[str, Any]:
    tick = time.perf_counter()
    spec = plan.pretrainings[name]
    steps = spec.steps_in(plan)
    every = _interval(plan, name)
    monitor = {"monitor": plan.monitor, "monitor_every": every, "monitor_features": plan.monitor_features} \
        if name == "mpp" and plan.monitor else {}
    pretrain({"objective": spec.objective, "model": plan.model, "data": plan.data, "image_size": plan.image_size,
              "batch_size": plan.batch_size, "steps": steps, "lr": spec.lr, "precision": plan.precision,
              "warmup_steps": max(1, steps // 15), "save_every": every,
              # every checkpoint kept: one that a stop signal adds must not push out a curve's
              "keep_checkpoints": steps, "log_every": max(1, steps // 30),
              "eval_samples": 1024 if name == "supervised" else 0, "output_dir": str(run), "log_with": "none",
              "seed": 0, **monitor},
             resume=RunDir(run).latest() is not None, console=console)
    return {**_last_metrics(run), "steps": steps, "seconds": time.perf_counter() - tick}


def _interval(plan: Plan, name: str) -> int:
    """Steps between the checkpoints of pre-training `name`: its smallest compute point when it is on the curve
    (its gap to scratch as pre-training grows), else only its end."""
    steps = plan.pretrainings[name].steps_in(plan)
    return max(1, round(steps * min(plan.compute_points, default=1.0))) if name in plan.curve else steps


def _curve_steps(plan: Plan, name: str) -> list[int]:
    """The steps of pre-training `name` whose checkpoints are transferred as well as its last one: the compute
    points as its own steps, each on its checkpoint interval (1/8 and 1/4 of 500 steps: 62 and 124)."""
    total, every = plan.pretrainings[name].steps_in(plan), _interval(plan, name)
    return sorted({s for f in plan.compute_points if (s := max(every, round(total * f / every) * every)) < total})


def _available(plan: Plan, console: Console) -> dict[str, Pretraining]:
    """The plan's pre-trainings whose objective is installed; a missing plugin's rows are skipped, and said so."""
    from ..registry import OBJECTIVES

    chosen = {}
    for name, spec in plan.pretrainings.items():
        if parse_spec(spec.objective)[0] in OBJECTIVES.names():
            chosen[name] = spec
        else:
            console.print(f"[yellow]skipping {name}: its objective comes with `pip install {spec.plugin}`[/]")
    return chosen


def _transfer_settings(plan: Plan, start: str, out: Path, seed: int, **changes: Any) -> dict[str, Any]:
    settings = dict(task=plan.task, start=start, model=plan.model if start == "scratch" else None,
                    shots=plan.shots, image_size=plan.image_size, batch_size=plan.transfer_batch,
                    lrs=list(plan.transfer_lrs), sweep_steps=list(plan.transfer_steps), test_samples=plan.test_samples,
                    seed=seed, output_dir=str(out), precision=plan.precision)
    if not plan.sweep:
        settings.update(sweep=False, lr=plan.transfer_lrs[0], steps=plan.transfer_steps[0])
    return {**settings, **changes}


def _transfers(jobs: dict[str, dict[str, Any]], parallel: int, console: Console) -> dict[str, dict[str, Any]]:
    """Run transfer jobs (name → TransferConfig settings): in this process one after the other, or `parallel` at
    a time as `vitx transfer` processes (small models leave most of a GPU idle; each gets its share of the cores
    and of the GPUs: transfer/jobs.py)."""
    if parallel <= 1:
        return {name: transfer(TransferConfig(**settings), resume=Path(settings["output_dir"]).exists(),
                               console=console)["tasks"][0] for name, settings in jobs.items()}
    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, (cores() - 1) // parallel)

    def run(name: str) -> dict[str, Any]:
        settings = {**jobs[name], "workers": workers}
        out = Path(settings["output_dir"])
        summary = out / "summary.json"
        if not summary.exists():
            # the job's settings as a recipe: the CLI checks them as any
            recipe = write_recipe(out.parent / f"{out.name}.toml", settings)
            log = out.parent / f"{out.name}.log"
            code = start_transfer(recipe, log, list(jobs).index(name), parallel, ("--resume",) if out.exists() else (),
                                  append=False).wait()
            if code != 0:
                raise VitxError(f"transfer {name} failed (exit {code}); see {log}")
        console.print(f"transfer {name}: done")
        return json.loads(summary.read_text())["tasks"][0]

    with ThreadPoolExecutor(parallel) as pool:
        return dict(zip(jobs, pool.map(run, jobs)))


# settings added to the plan since plan.json files were first written: the value a reproduction made before
# had, so that continuing it with that value (`--set curve=["mpp"]`) is the same plan
UNRECORDED: dict[str, Any] = {"curve": ["mpp"]}


def _same_plan(out: Path, plan: Plan) -> None:
    """A second call continues the first only with the same plan (`jobs` may differ): mixing runs of two plans
    in one report would misreport both. The plan is written before anything is trained."""
    now = json.loads(json.dumps(plan.to_dict()))
    saved = read_json_object(out / "plan.json")
    if saved is None:
        atomic_write_text(out / "plan.json", json.dumps(now, indent=1))
        return
    differ = [k for k in now if k != "jobs" and saved.get(k, UNRECORDED.get(k)) != now[k]]
    if differ:
        was = saved.get(differ[0], UNRECORDED.get(differ[0]))
        raise VitxError(f"{out} holds a reproduction of another plan ({', '.join(differ)} differ: was {was!r}); "
                        "continue it with the same plan or choose a new --output-dir")


def reproduce(out_dir: str | Path = "runs/reproduce", plan: Plan = CPU, console: Console | None = None) -> dict[str, Any]:
    """Run every step (or what is missing) and write results.json and REPORT.md into `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _same_plan(out, plan)
    console = console or make_console()
    began = time.perf_counter()
    chosen = _available(plan, console)
    runs = {name: out / f"pretrain-{name}" for name in chosen}
    results: dict[str, Any] = {"plan": plan.to_dict(), "pretrain": {}, "transfer": {}, "compute": {}, "hires": {},
                               "inspect": {}, "resumed": any(RunDir(r).latest() is not None for r in runs.values())}

    console.rule("1/4 pre-training")
    for name in chosen:
        results["pretrain"][name] = _pretrain(plan, name, runs[name], console)

    console.rule("2/4 low-data transfer")
    starts = {"scratch": "scratch", **{name: str(run) for name, run in runs.items()}}
    for name in (n for n in plan.curve if n in runs):  # the compute curve: checkpoints part-way through
        for step in _curve_steps(plan, name):
            checkpoint = runs[name] / "checkpoints" / f"step_{step:08d}"
            if not checkpoint.is_dir():  # removed by hand, or pre-trained before its step was on the curve
                raise VitxError(f"{name}'s checkpoint at step {step} is missing ({checkpoint}), so its compute "
                                f"curve cannot be transferred; remove {runs[name]} to pre-train it again")
            starts[f"{name}@{step}"] = str(checkpoint)
    jobs = {f"{name}-seed{seed}": _transfer_settings(plan, start, out / "transfer" / f"{name}-seed{seed}", seed)
            for name, start in starts.items() for seed in plan.seeds}
    done = _transfers(jobs, plan.jobs, console)
    for name in starts:
        rows = [done[f"{name}-seed{seed}"] for seed in plan.seeds]
        (results["compute"] if "@" in name else results["transfer"])[name] = rows

    console.rule("3/4 fine-tuning at a higher resolution")
    hires = {}
    for seed, low in list(zip(plan.seeds, results["transfer"]["supervised"]))[:plan.hires_seeds]:
        chosen_run = low["chosen"]  # the same lr and steps as the run at the pre-training resolution
        hires[str(seed)] = _transfer_settings(plan, starts["supervised"], out / "hires" / f"seed{seed}", seed,
                                              image_size=plan.hires, sweep=False, lr=chosen_run["lr"],
                                              steps=chosen_run["steps"])
    results["hires"] = _transfers(hires, plan.jobs, console)

    console.rule("4/4 inspecting")
    torch.manual_seed(0)
    backbones = {"init": create_backbone(plan.model, img_size=plan.image_size),
                 "supervised": load_backbone(runs["supervised"]), "mpp": load_backbone(runs["mpp"])}
    for name, backbone in backbones.items():
        numbers = inspect_backbone(backbone.to(process_device()), out / "inspect" / name, data=plan.data, samples=plan.attention_images)
        results["inspect"][name] = {k: v for k, v in numbers.items() if k != "attention_rollout"}
        results["inspect"][name]["position_similarity"].pop("matrix", None)

    results["seconds"] = time.perf_counter() - began
    results["machine"] = {"cpu": platform.processor() or platform.machine(), "cores": torch.get_num_threads(),
                          "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                          "torch": torch.__version__, "vitx": __version__}
    results["claims"] = judge(results)
    atomic_write_text(out / "results.json", json.dumps(results, indent=1))
    write_report(results, out / "REPORT.md", warn=console.print)
    return results


__all__ = ["reproduce"]
