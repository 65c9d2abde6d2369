"""LoRA as a vitx transfer method (Hu et al. 2021): the pre-trained backbone stays frozen; each adapted projection
W learns a low-rank update, W x + (alpha / r) · B A x, with A (r × in) random and B (out × r) zero, so training
starts exactly at the pre-trained model. The task head trains as usual.

The default is the published VTAB-1k LoRA-8 (NOAH, Zhang et al. 2022, and the PEFT tables after it, V-PETL Bench
included: 0.29M parameters on ViT-B/16): rank 8 on the fused attention `qkv` of every block, alpha = rank (no
extra scaling), 12 × 8 × (768 + 2304) = 294,912 parameters on B/16. `targets='qkv,proj'` adapts the attention
output too (442,368 on B/16), `'qkv,proj,fc1,fc2'` the MLPs as well.

Saving folds B A into W (`vitx_export`), so a transfer's model.safetensors is a plain backbone that loads like
any other vitx checkpoint; the training state kept for --resume holds A and B apart.

    vitx transfer --task vtab/dsprites_loc --adapter 'lora(rank=8)'
"""
from __future__ import annotations

import math
import torch
import torch.nn as nn
import torch.nn.functional as F

from vitx import VitxError, register_adapter
from vitx.adapters import AdaptContext, Adapter


class LoRALinear(nn.Linear):
    """A frozen `nn.Linear` plus a trainable rank-`rank` update; keeps the layer's own `weight`/`bias` keys."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__(base.in_features, base.out_features, bias=base.bias is not None,
                         device=base.weight.device, dtype=base.weight.dtype)
        self.load_state_dict(base.state_dict())
        self.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, self.in_features, device=self.weight.device))
        self.lora_b = nn.Parameter(torch.zeros(self.out_features, rank, device=self.weight.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear initialises its weight

    def delta(self) -> torch.Tensor:
        return (self.lora_b @ self.lora_a) * self.scale  # (out, in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        low_rank = F.linear(F.linear(x, self.lora_a.to(x.dtype)), self.lora_b.to(x.dtype))  # (..., r) -> (..., out)
        return F.linear(x, self.weight, self.bias) + low_rank * self.scale

    def vitx_export(self, state: dict[str, torch.Tensor], prefix: str) -> None:
        """Publish W + (alpha / r) · B A under the plain layer's key; drop the factors."""
        if not state:  # a process that holds no weights (sharded saves gather them on one)
            return
        a, b = state.pop(f"{prefix}lora_a", None), state.pop(f"{prefix}lora_b", None)
        if a is None or b is None or f"{prefix}weight" not in state:
            raise RuntimeError(f"LoRA export: no {prefix}lora_a/lora_b/weight in the state being saved; the saved "
                               "backbone would not hold the trained update")
        weight = state[f"{prefix}weight"]
        state[f"{prefix}weight"] = (weight.float() + (b.float() @ a.float()) * self.scale).to(weight.dtype)


@register_adapter("lora", description="frozen backbone; trainable rank-r updates of the fused attention qkv (the "
                                      "published LoRA-8; targets='qkv,proj' adds proj), merged into the saved weights")
class LoRA(Adapter):
    role = "method"

    def __init__(self, rank: int = 8, alpha: float | None = None, targets: str = "qkv") -> None:
        if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
            raise VitxError(f"lora rank must be a positive integer, got {rank!r}")
        if alpha is not None and (not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha <= 0):
            raise VitxError(f"lora alpha must be a positive number, got {alpha!r}")
        names = tuple(t.strip() for t in str(targets).split(",") if t.strip())
        if not names:
            raise VitxError("lora targets is empty; name the Linear layers to adapt, e.g. targets='qkv,proj'")
        alpha = float(rank if alpha is None else alpha)
        super().__init__(rank=rank, alpha=alpha, targets=",".join(names))
        self.rank, self.alpha, self.targets = rank, alpha, names

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        model.requires_grad_(False)
        wrapped = 0
        for name, module in list(model.backbone.named_modules()):
            parent_name, _, child = name.rpartition(".")
            if child in self.targets and type(module) is nn.Linear:
                parent = model.backbone.get_submodule(parent_name) if parent_name else model.backbone
                setattr(parent, child, LoRALinear(module, self.rank, self.alpha))
                wrapped += 1
        if wrapped == 0:
            raise VitxError(f"lora found no nn.Linear named {' or '.join(self.targets)} in the backbone; "
                            "pass targets='...' with the names of its attention projections")
        model.head.requires_grad_(True)


__all__ = ["LoRA", "LoRALinear"]
