"""What is trained at transfer: everything (the paper's fine-tuning), only the head (linear probe), or nothing
(few-shot: the head is solved for in closed form; see `vitx.evaluation.least_squares`)."""
from __future__ import annotations

import math

import torch.nn as nn

from ..errors import VitxError
from ..evaluation import FEWSHOT_REG
from ..registry import register_adapter
from .base import TRAINING, AdaptContext, Adapter, freeze


@register_adapter("finetune",
                  description="full fine-tuning: every backbone weight and the head train (the paper's transfer)")
class FineTune(Adapter):
    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        model.requires_grad_(True)


@register_adapter("linear-probe",
                  description="frozen backbone (in eval mode), only the linear head trains")
class LinearProbe(Adapter):
    ignores = ("drop_path", "drop_path_mode", "layer_decay")  # the backbone never trains: the head alone, at the full lr
    ignores_because = "trains only the head, on a frozen backbone in eval mode"

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        freeze(model.backbone)  # in eval mode too: drop-path and dropout off, as evaluation reads it
        model.head.requires_grad_(True)


@register_adapter("fewshot",
                  description="frozen backbone; head = regularised least squares onto {-1,1}^K (closed form)")
class FewShot(Adapter):
    """big_vision's few-shot linear evaluation: whitened features, bias feature, L2 `reg` (2^10)."""

    closed_form = True
    ignores = TRAINING
    ignores_because = "solves for the head in closed form and trains nothing"

    def __init__(self, reg: float = FEWSHOT_REG) -> None:
        super().__init__(reg=reg)
        if isinstance(reg, bool) or not isinstance(reg, (int, float)) or not math.isfinite(reg) or reg <= 0:
            raise VitxError(f"fewshot reg must be a positive number (big_vision's 1024), got {reg!r}")
        self.reg = float(reg)

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        model.requires_grad_(False)
