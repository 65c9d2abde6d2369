"""BitFit (Ben Zaken et al. 2022): the pre-trained backbone stays frozen except for its bias terms; the task
head trains. The saved backbone is a plain one (only biases differ from the start).

The published VTAB-1k BitFit row (VPT's "Bias", reprinted by NOAH and V-PETL Bench) was trained by VPT's code
(github.com/KMnP/vpt, MODEL.TRANSFER_TYPE "tinytl-bias": every parameter named *bias* trains,
src/models/vit_models.py:93-96) with SGD, lr × weight decay chosen per task on val200 from a grid
(tune_vtab.py:215-266), 100 epochs with 10 of warm-up. No single lr stands behind it, so BitFit declares no
reference of its own: `--protocol peft` runs it at the preset's shared settings (NOAH's AdamW, lr 1e-3, weight
decay 1e-4, batch 64, 100 epochs), and `--compare vit-b16-i21k-bitfit` prints what differs beside the row."""
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
