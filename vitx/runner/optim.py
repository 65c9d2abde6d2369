"""Optimisers and learning-rate schedules: the paper's Adam(W) for pre-training and SGD+momentum for transfer,
any other of timm's optimizer factory by name, and layer-wise learning-rate decay (BEiT/MAE fine-tuning)."""
from __future__ import annotations

import math
import re

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR

from ..errors import VitxError


def layer_id(name: str, depth: int) -> int:
    """A parameter's depth for layer decay, as MAE's `get_layer_id_for_vit` (and BEiT's) count it: the embeddings
    (patch, position, [class] and register tokens) are layer 0, block i is layer i + 1, and the final norm and
    every head are layer depth + 1, so they learn at the full lr. timm's `param_groups_layer_decay` differs in the
    final norm alone: its group matcher puts `norm` with the last block (lr · d, e.g. 0.65 of it), while vitx
    follows MAE and BEiT (lr · 1)."""
    local = name.split("backbone.", 1)[1] if name.startswith("backbone.") else None
    if local is None:
        return depth + 1
    if local.startswith(("patch_embed", "pos_embed", "cls_token", "reg_token")):
        return 0
    found = re.match(r"blocks\.(\d+)\.", local)
    return int(found.group(1)) + 1 if found else depth + 1


def param_groups(model: nn.Module, weight_decay: float, lr: float,
                 layer_decay: float = 1.0) -> list[dict]:
    """Decay matrices only: biases, norms, position embeddings and the [class] token are not decayed. With
    `layer_decay` < 1, block i's learning rate is lr · layer_decay^(depth + 1 − layer_id): the embeddings move
    least, the final norm and the head at the full rate, as in MAE (`layer_id`; `lr_scale` records each group's
    factor)."""
    skip: set[str] = set()
    for prefix, module in model.named_modules():
        if hasattr(module, "no_weight_decay"):
            skip |= {f"{prefix}.{n}" if prefix else n for n in module.no_weight_decay()}
    depth = len(getattr(getattr(model, "backbone", None), "blocks", ()))
    if layer_decay != 1.0 and depth == 0:
        raise VitxError("--layer-decay needs a backbone with transformer blocks (backbone.blocks)")

    def group(layer: int, decayed: bool) -> dict:
        scale = layer_decay ** (depth + 1 - layer) if layer_decay != 1.0 else 1.0
        return {"params": [], "weight_decay": weight_decay if decayed else 0.0, "lr": lr * scale, "lr_scale": scale,
                "decayed": decayed}  # (a weight-decay schedule sets the decayed groups' rate: set_weight_decay)

    # without layer decay: the paper's two groups (decayed first, as sorted below), even when one is empty
    groups = {} if layer_decay != 1.0 else {(0, True): group(0, True), (0, False): group(0, False)}
    for name, p in model.named_parameters():
        if p.requires_grad:
            key = (layer_id(name, depth) if layer_decay != 1.0 else 0, not (p.ndim <= 1 or name in skip))
            groups.setdefault(key, group(*key))["params"].append(p)
    return [groups[key] for key in sorted(groups, key=lambda k: (k[0], not k[1]))]


def fuse(device: torch.device) -> bool:
    """Whether Adam(W) runs fused: on CUDA (one kernel per step, and the runner then skips non-finite updates
    on the device, through the kernel's found_inf)."""
    return device.type == "cuda"


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float,
                    device: torch.device | str = "cpu", layer_decay: float = 1.0) -> torch.optim.Optimizer:
    """adamw (decoupled decay) and adam use β = (0.9, 0.999) as in the paper; sgd uses momentum 0.9; any other
    name is timm's optimizer of that name (momentum 0.9 where it has one), over the same parameter groups.

    On CUDA, Adam(W) runs fused (one kernel for every parameter's update, instead of a few per parameter
    list); elsewhere it keeps PyTorch's default (foreach)."""
    groups = param_groups(model, weight_decay, lr, layer_decay)
    fused = {"fused": True} if fuse(torch.device(device)) else {}
    if name in ("adamw", "adam"):
        return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(groups, lr=lr, betas=(0.9, 0.999), **fused)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.9)
    from timm.optim import create_optimizer_v2

    return create_optimizer_v2([g for g in groups if g["params"]], opt=name, lr=lr, weight_decay=weight_decay,
                               momentum=0.9)


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Multiplier for the update at 0-based `step`: linear warm-up to 1, then cosine or linear decay to 0."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def weight_decay_at(step: int, total: int, start: float, end: float) -> float:
    """The weight decay of the update at 0-based `step` of `total`: DINO's `cosine_scheduler(start, end, ...)`,
    end + (start − end) · (1 + cos(π · step / total)) / 2, without warm-up."""
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * step / max(1, total)))


def set_weight_decay(optimizer: torch.optim.Optimizer, value: float) -> None:
    """`value` for every group that decays (biases, norms, position embeddings and tokens keep 0)."""
    for group in optimizer.param_groups:
        if group.get("decayed", group["weight_decay"] > 0):
            group["weight_decay"] = value


def build_schedule(optimizer: torch.optim.Optimizer, total: int, warmup: int, schedule: str) -> LambdaLR:
    return LambdaLR(optimizer, lambda s: lr_factor(s, total, warmup, schedule))
