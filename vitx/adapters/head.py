"""The paper's transfer head: drop the whole pre-training head, attach one zero-initialised D×K layer."""
from __future__ import annotations

import torch.nn as nn

from ..heads import LinearHead
from ..registry import register_adapter
from .base import AdaptContext, Adapter


@register_adapter("zero-head",
                  description="replace the pre-training head (both layers) by one zero-initialised D×K linear layer")
class ZeroHead(Adapter):
    """All logits are exactly 0 before the first step, so fine-tuning starts from the uniform prediction."""

    role = "head"

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        model.head = LinearHead(model.backbone.embed_dim, ctx.num_classes)
