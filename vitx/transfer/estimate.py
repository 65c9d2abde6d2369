"""`vitx transfer --dry-run`: the work list (each item's task, kind, lr, steps, seed, image size and shard),
its totals, and an estimate of its cost from a few optimiser steps of the start's model timed on this machine.
Nothing is trained or written, and no data is opened (a suite's tasks are listed without it)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from rich.console import Console
from rich.table import Table

from ..adapters import resolve_adapters
from ..backbones import create_backbone
from ..console import say
from ..errors import VitxError, first_line
from ..runs.start import load_start
from ..spec import parse_spec
from ..tasks import Task
from .config import TransferConfig, parse_shard
from .finetune import adapted_model
from .items import Item, partition, selection_mode, work_list


def architecture(cfg: TransferConfig) -> nn.Module:
    """The start's backbone; a timm start's architecture without its weights (a dry run fetches nothing)."""
    if cfg.start.startswith("timm:") and not cfg.start.startswith("timm:local-dir:"):
        name, options = parse_spec(cfg.start)
        return create_backbone(name, **{**options, "pretrained": False})
    return load_start(cfg.start, cfg.model, cfg.seed, use_ema=cfg.use_ema)


def measure(cfg: TransferConfig, start: nn.Module, size: int, num_classes: int) -> dict[str, Any]:
    """Seconds per training image: a few optimiser steps (forward, backward, SGD update of what the method
    trains; on a GPU in --precision's autocast) of the adapted model at `size` px on random images, after one
    to warm up."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model = adapted_model(start, num_classes, size, resolve_adapters(cfg.adapters), drop_path=cfg.drop_path,
                          drop_path_mode=cfg.drop_path_mode).to(device).train()  # (skipping changes the time)
    params = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    # on a CPU in float32: its bf16 is emulated on most, hours for what the GPU the estimate is for does in ms
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision) if cuda else None
    batch, steps = (min(cfg.batch_size, 32), 5) if cuda else (min(cfg.batch_size, 2), 2)
    while True:
        try:
            images = torch.randn(batch, 3, size, size, device=device)
            labels = torch.randint(0, num_classes, (batch,), device=device)
            seconds = _time_steps(model, optimiser, images, labels, dtype, device, steps)
            break
        except torch.cuda.OutOfMemoryError:
            if batch == 1:
                raise
            batch //= 2
            torch.cuda.empty_cache()
    where = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} thread(s)"
    return {"seconds_per_image": seconds / batch, "batch": batch, "steps": steps, "device": where,
            "gpu": cuda, "image_size": size, "precision": str(dtype).replace("torch.", "") if dtype else "float32"}


def _time_steps(model: nn.Module, optimiser: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor,
                dtype: torch.dtype | None, device: torch.device, steps: int) -> float:
    """Mean seconds of one optimiser step, over `steps` after a warm-up."""
    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model({"image": images, "label": labels})["loss"]
        loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)

    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    tick = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - tick) / steps


def _row(item: Item, shard: int, size: Any) -> dict[str, Any]:
    return {"item": item.key, "task": item.task, "kind": item.kind, "lr": item.lr, "steps": item.steps,
            "seed": item.seed, "image_size": size, "shard": shard}


def dry_run(cfg: TransferConfig, tasks: list[Task], folders: dict[str, Path], console: Console) -> dict[str, Any]:
    """Print the plan and its estimate; return them (items, totals, per-shard totals, estimate)."""
    method = resolve_adapters(cfg.adapters)[-1]
    mode = selection_mode(cfg, len(tasks), method.closed_form)
    items = work_list(cfg, tasks, folders, mode)
    index, count = parse_shard(cfg.shard)
    ways = count if count > 1 else cfg.jobs  # --jobs K: K processes take the items in turn, about this balance
    shards = partition(items, ways)
    try:
        start, failed = architecture(cfg), ""
    except (VitxError, OSError, RuntimeError) as exc:  # e.g. a start not on this machine: the list without timing
        start, failed = None, first_line(exc)
    size = cfg.image_size or (int(start.patch_embed.img_size[0]) if start is not None else None)
    rows = [_row(item, shard, size) for item, shard in zip(items, shards)]
    _print_items(rows, ways, count > 1, console)
    steps = sum(i.steps for i in items)
    totals = {"items": len(items), "sweep": sum(i.kind == "sweep" for i in items),
              "final": sum(i.kind == "final" for i in items), "closed": sum(i.kind == "closed" for i in items),
              "tasks": len(tasks), "optimiser_steps": steps, "images": steps * cfg.batch_size}
    per_shard = [{"shard": s, "items": shards.count(s), "optimiser_steps": sum(i.steps for i, x in zip(items, shards)
                                                                             if x == s)} for s in range(ways)]
    say(console, f"{totals['items']} items ({totals['sweep']} sweep points, {totals['final']} final runs"
                 + (f", {totals['closed']} closed-form fits" if totals["closed"] else "") + f") on {len(tasks)} "
                 f"task(s): {steps:,} optimiser steps of {cfg.batch_size} = {totals['images']:,} training images at "
                 f"{size or 'the start’s'} px")
    if ways > 1:
        label = "shard" if count > 1 else "job"
        say(console, "; ".join(f"{label} {s['shard']}: {s['items']} items, {s['optimiser_steps']:,} steps"
                                for s in per_shard))
    estimate = _estimate(cfg, start, failed, size, tasks, totals, per_shard, ways, console)
    if count > 1:
        say(console, f"this process (--shard {cfg.shard}) would run {per_shard[index]['items']} of them")
    return {"items": rows, "totals": totals, "shards": per_shard, "estimate": estimate, "selection": mode}


def _print_items(rows: list[dict[str, Any]], ways: int, sharded: bool, console: Console) -> None:
    table = Table(title="work list")
    columns = ["#", "item", "kind", "lr", "steps", "seed", "px"] + (["shard" if sharded else "job"] if ways > 1 else [])
    for col in columns:
        table.add_column(col, justify="left" if col in ("item", "kind") else "right")
    for n, r in enumerate(rows):
        lr = f"{r['lr']:g}" if r["lr"] is not None else ("chosen" if r["kind"] == "final" else "-")
        table.add_row(str(n), r["item"], r["kind"], lr, str(r["steps"]), "-" if r["seed"] is None else str(r["seed"]),
                      str(r["image_size"] or "?"), *([str(r["shard"])] if ways > 1 else []))
    console.print(table)


def _estimate(cfg: TransferConfig, start: nn.Module | None, failed: str, size: int | None, tasks: list[Task],
              totals: dict[str, Any], per_shard: list[dict[str, Any]], ways: int, console: Console) -> dict[str, Any]:
    if start is None or size is None:
        say(console, f"no estimate: the start could not be built here ({failed})")
        return {}
    if not totals["images"]:
        say(console, "no training: a closed-form fit per task costs one forward pass over its images")
        return {}
    timed = measure(cfg, start, size, tasks[0].num_classes if tasks else 10)
    per_image = timed["seconds_per_image"]
    hours = totals["images"] * per_image / 3600
    longest = max(s["optimiser_steps"] for s in per_shard) * cfg.batch_size * per_image / 3600
    unit = "GPU-hours" if timed["gpu"] else "CPU-hours"
    shards = f"; the longest of {ways} {'shards' if cfg.shard else 'jobs'}: {longest:,.1f} h" if ways > 1 else ""
    say(console, f"estimate: {per_image * 1000:.1f} ms per training image on this machine ({timed['device']}: {timed['steps']} "
        f"optimiser steps of {timed['batch']} images at {size} px in {timed['precision']}) → {hours:,.1f} {unit} "
        f"for the work list{shards}")
    say(console, f"assumes: the time per image measured at batch {timed['batch']} holds at --batch-size "
                 f"{cfg.batch_size} (a GPU is usually faster per image at a larger batch; more processes on one GPU "
                 "share it); training steps only (the validation of each sweep point and the test split of each "
                 "final run add their forward passes); final runs counted at the longest swept steps until the "
                 "selection chooses; data loading keeping up")
    return {**timed, "hours": hours, "unit": unit, "longest_shard_hours": longest}


__all__ = ["architecture", "dry_run", "measure"]
