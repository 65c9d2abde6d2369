"""BitFit (Ben Zaken et al. 2022): the pre-trained backbone stays frozen except for its bias terms; the task
head trains. The saved backbone is a plain one (only biases differ from the start)."""
from __future__ import annotations

import torch.nn as nn

from ..errors import VitxError
from ..registry import register_adapter
from .base import AdaptContext, Adapter


@register_adapter("bitfit", description="frozen backbone except its biases (BitFit); the head trains")
class BitFit(Adapter):
    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        model.requires_grad_(False)
        biases = [p for name, p in model.backbone.named_parameters() if name.endswith(".bias")]
        if not biases:
            raise VitxError("bitfit found no bias terms in the backbone (built without biases?)")
        for p in biases:
            p.requires_grad_(True)
        model.head.requires_grad_(True)


__all__ = ["BitFit"]
