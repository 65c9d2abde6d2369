"""Optimisers and learning-rate schedules from the paper: Adam(W) for pre-training, SGD+momentum for transfer."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only: biases, norms, position embeddings and the [class] token are not decayed."""
    skip: set[str] = set()
    for prefix, module in model.named_modules():
        if hasattr(module, "no_weight_decay"):
            skip |= {f"{prefix}.{n}" if prefix else n for n in module.no_weight_decay()}
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 or name in skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def fuse(device: torch.device) -> bool:
    """Whether Adam(W) runs fused: on CUDA (one kernel per step, and the runner then skips non-finite updates
    on the device, through the kernel's found_inf)."""
    return device.type == "cuda"


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float,
                    device: torch.device | str = "cpu") -> torch.optim.Optimizer:
    """adamw (decoupled decay) and adam use β = (0.9, 0.999) as in the paper; sgd uses momentum 0.9.

    On CUDA, Adam(W) runs fused (one kernel for every parameter's update, instead of a few per parameter
    list); elsewhere it keeps PyTorch's default (foreach)."""
    groups = param_groups(model, weight_decay)
    fused = {"fused": True} if fuse(torch.device(device)) else {}
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), **fused)
    if name == "adam":
        return torch.optim.Adam(groups, lr=lr, betas=(0.9, 0.999), **fused)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.9)
    raise ValueError(name)


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Multiplier for the update at 0-based `step`: linear warm-up to 1, then cosine or linear decay to 0."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def build_schedule(optimizer: torch.optim.Optimizer, total: int, warmup: int, schedule: str) -> LambdaLR:
    return LambdaLR(optimizer, lambda s: lr_factor(s, total, warmup, schedule))
