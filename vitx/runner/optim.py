"""Optimisers and learning-rate schedules: the paper's Adam(W) for pre-training and SGD+momentum for transfer,
any other of timm's optimizer factory by name, and layer-wise learning-rate decay (BEiT/MAE fine-tuning)."""
from __future__ import annotations

import math
import re
from typing import Iterable

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import LambdaLR

from ..errors import VitxError
from .config import BETAS


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


def exempt_from_decay(model: nn.Module, decay_tokens: bool = False) -> set[str]:
    """The names of the parameters weight decay leaves alone. Always biases and every 1-D parameter (norms'
    scales and shifts, 1-D tokens): DINO's `get_params_groups`, MAE's `add_weight_decay`. Unless `decay_tokens`,
    also what a module's `no_weight_decay()` names (timm's ViT: position embeddings, [class] and register tokens),
    as timm's `param_groups_weight_decay` and big_vision's decay of kernels only leave them."""
    skip: set[str] = set()
    if not decay_tokens:
        for prefix, module in model.named_modules():
            if hasattr(module, "no_weight_decay"):
                skip |= {f"{prefix}.{n}" if prefix else n for n in module.no_weight_decay()}
    return {name for name, p in model.named_parameters()
            if p.ndim <= 1 or name.endswith(".bias") or name in skip}


def param_groups(model: nn.Module, weight_decay: float, lr: float, layer_decay: float = 1.0,
                 decay_tokens: bool = False) -> list[dict]:
    """Decay matrices only (`exempt_from_decay`: biases and norms never; position embeddings and the [class]
    token unless `decay_tokens`). With `layer_decay` < 1, block i's learning rate is lr · layer_decay^(depth + 1
    − layer_id): the embeddings move least, the final norm and the head at the full rate, as in MAE (`layer_id`;
    `lr_scale` records each group's factor)."""
    skip = exempt_from_decay(model, decay_tokens)
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
            key = (layer_id(name, depth) if layer_decay != 1.0 else 0, name not in skip)
            groups.setdefault(key, group(*key))["params"].append(p)
    return [groups[key] for key in sorted(groups, key=lambda k: (k[0], not k[1]))]


def fuse(device: torch.device) -> bool:
    """Whether Adam(W) runs fused: on CUDA (one kernel per step, and the runner then skips non-finite updates
    on the device, through the kernel's found_inf)."""
    return device.type == "cuda"


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float,
                    device: torch.device | str = "cpu", layer_decay: float = 1.0, decay_tokens: bool = False,
                    betas: tuple[float, float] = BETAS) -> torch.optim.Optimizer:
    """adamw (decoupled decay) and adam use `betas` (the paper's (0.9, 0.999); MAE's (0.9, 0.95)); sgd uses
    momentum 0.9; any other name is timm's optimizer of that name (momentum 0.9 where it has one), over the same
    parameter groups.

    On CUDA, Adam(W) runs fused (one kernel for every parameter's update, instead of a few per parameter
    list); elsewhere it keeps PyTorch's default (foreach)."""
    groups = param_groups(model, weight_decay, lr, layer_decay, decay_tokens)
    fused = {"fused": True} if fuse(torch.device(device)) else {}
    if name in ("adamw", "adam"):
        return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(groups, lr=lr, betas=tuple(betas), **fused)
    if tuple(betas) != BETAS:
        raise VitxError(f"--betas is Adam(W)'s; --optimizer {name} does not take it")
    if name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=0.9)
    from timm.optim import create_optimizer_v2

    return create_optimizer_v2([g for g in groups if g["params"]], opt=name, lr=lr, weight_decay=weight_decay,
                               momentum=0.9)


def lr_factor(step: int, total: int, warmup: int, schedule: str, start: str = "first-step",
              floor: float = 0.0) -> float:
    """Multiplier of the peak lr for the update at 0-based `step`: a linear warm-up over `warmup` steps that begins
    as `start` says (WARMUP_STARTS), then cosine or linear decay from 1 to `floor` (min_lr / lr) at `total`:
    MAE's `adjust_learning_rate` and DINO's `cosine_scheduler`, the decay's progress (step − W) / (total − W)."""
    if step < warmup:
        if start == "zero":  # MAE util/lr_sched.py: lr · epoch / warmup_epochs, per iteration (big_vision's too)
            return step / warmup
        if start == "linspace":  # DINO utils.cosine_scheduler: np.linspace(0, lr, W), lr at the last warm-up step
            return step / (warmup - 1) if warmup > 1 else 0.0
        return (step + 1) / warmup  # lightly's cosine_warmup_schedule: the first update at lr / W
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    shape = 0.5 * (1.0 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress
    return floor + (1.0 - floor) * shape


def cosine_from(step: int, total: int, start: float, end: float) -> float:
    """A value going from `start` to `end` on a cosine, at 0-based `step` of `total`: DINO's
    `cosine_scheduler(start, end, ...)` without warm-up (utils.py:193-194), end + (start − end) · (1 + cos(π ·
    step / total)) / 2, never quite `end`. The weight decay's schedule, and DINO's teacher momentum."""
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * step / max(1, total)))


def set_weight_decay(optimizer: torch.optim.Optimizer, value: float) -> None:
    """`value` for every group that decays (biases, norms, position embeddings and tokens keep 0)."""
    for group in optimizer.param_groups:
        if group.get("decayed", group["weight_decay"] > 0):
            group["weight_decay"] = value


def build_schedule(optimizer: torch.optim.Optimizer, total: int, warmup: int, schedule: str,
                   start: str = "first-step", floor: float = 0.0) -> LambdaLR:
    """The lr schedule of `lr_factor`; `floor` is min_lr / lr (the groups' rates keep layer decay's scale)."""
    return LambdaLR(optimizer, lambda s: lr_factor(s, total, warmup, schedule, start, floor))


@torch.no_grad()
def clip_per_parameter(params: Iterable[nn.Parameter], clip: float) -> torch.Tensor:
    """DINO's `utils.clip_gradients`: each parameter's gradient scaled by clip / (‖g‖ + 1e-6) where that is below
    1, separately (no parameter's large gradient shrinks another's). The same arithmetic as DINO's, without its
    host reads: the result is bit for bit DINO's. Returns the gradients' norms before clipping, (P,)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(0)
    norms = torch.stack([g.norm(2) for g in grads])  # (P,) DINO's `p.grad.data.norm(2)`, one per parameter
    if clip > 0:
        coefs = clip / (norms + 1e-6)  # (P,)
        torch._foreach_mul_(grads, list(coefs.clamp(max=1.0).unbind()))  # × 1.0 leaves a gradient as it was
    return norms
