"""The small-scale reproduction, run end to end: pre-train (supervised, MPP), transfer (from scratch, MPP,
supervised; then at a higher resolution), inspect, judge, report. Every step resumes: a finished run is kept,
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
from ..checkpoint import atomic_write_text, load_backbone
from ..runner import pretrain
from ..runner.launch import process_device
from ..runner.reporting import make_console
from ..runner.rundir import RunDir
from ..transfer import TransferConfig, transfer
from .claims import judge
from .plan import CPU, Plan
from .report import write_report


def _last_metrics(run: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    first, last = rows[0], rows[-1]
    return {"first": first, "last": last, "val": next((r for r in reversed(rows) if "val_loss" in r), {})}


def _pretrain(plan: Plan, name: str, objective: str, lr: float, run: Path, console: Console) -> dict[str, Any]:
    tick = time.perf_counter()
    pretrain({"objective": objective, "model": plan.model, "data": plan.data, "image_size": plan.image_size,
              "batch_size": plan.batch_size, "steps": plan.pretrain_steps, "lr": lr,
              "warmup_steps": max(1, plan.pretrain_steps // 15), "save_every": plan.pretrain_steps,
              "log_every": max(1, plan.pretrain_steps // 30), "eval_samples": 1024 if name == "supervised" else 0,
              "output_dir": str(run), "log_with": "none", "seed": 0},
             resume=RunDir(run).latest() is not None, console=console)
    return {**_last_metrics(run), "seconds": time.perf_counter() - tick}


def _transfer(plan: Plan, start: str, out: Path, seed: int, console: Console, **changes: Any) -> dict[str, Any]:
    settings = dict(task=plan.task, start=start, model=plan.model if start == "scratch" else None,
                    shots=plan.shots, image_size=plan.image_size, batch_size=plan.batch_size,
                    lrs=list(plan.transfer_lrs), sweep_steps=[plan.transfer_steps], test_samples=plan.test_samples,
                    seed=seed, output_dir=str(out))
    cfg = TransferConfig(**{**settings, **changes})
    return transfer(cfg, resume=out.exists(), console=console)["tasks"][0]


def reproduce(out_dir: str | Path = "runs/reproduce", plan: Plan = CPU, console: Console | None = None) -> dict[str, Any]:
    """Run every step (or what is missing) and write results.json and REPORT.md into `out_dir`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    console = console or make_console()
    began = time.perf_counter()
    runs = {"supervised": out / "pretrain-supervised", "mpp": out / "pretrain-mpp"}
    results: dict[str, Any] = {"plan": plan.to_dict(), "pretrain": {}, "transfer": {}, "hires": {}, "inspect": {},
                               "resumed": any(RunDir(r).latest() is not None for r in runs.values())}

    console.rule("1/4 pre-training")
    results["pretrain"]["supervised"] = _pretrain(plan, "supervised", "supervised", plan.supervised_lr,
                                                  runs["supervised"], console)
    results["pretrain"]["mpp"] = _pretrain(plan, "mpp", plan.mpp, plan.mpp_lr, runs["mpp"], console)

    console.rule("2/4 low-data transfer")
    starts = {"scratch": "scratch", "mpp": str(runs["mpp"]), "supervised": str(runs["supervised"])}
    for name, start in starts.items():
        results["transfer"][name] = [_transfer(plan, start, out / "transfer" / f"{name}-seed{seed}", seed, console)
                                     for seed in plan.seeds]

    console.rule("3/4 fine-tuning at a higher resolution")
    for seed, low in zip(plan.seeds, results["transfer"]["supervised"]):
        chosen = low["chosen"]  # the same lr and steps as the run at the pre-training resolution
        results["hires"][str(seed)] = _transfer(plan, starts["supervised"], out / "hires" / f"seed{seed}", seed,
                                                console, image_size=plan.hires, sweep=False, lr=chosen["lr"],
                                                steps=chosen["steps"])

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
    write_report(results, out / "REPORT.md")
    return results


__all__ = ["reproduce"]
