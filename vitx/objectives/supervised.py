"""Supervised classification: softmax cross-entropy (sigmoid for multi-label), optional label smoothing."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import VitxError
from ..heads import build_head
from ..registry import register_objective
from .base import Objective


@register_objective("supervised", description="classification: softmax (or sigmoid) cross-entropy on the [class] token")
class Supervised(Objective):
    """Classify the pooled [class] representation with the paper's pre-training head."""

    needs_labels = True

    def __init__(self, backbone: nn.Module, num_classes: int, head: str = "mlp",
                 multilabel: bool = False, label_smoothing: float = 0.0, **options: Any) -> None:
        if options:
            raise VitxError(f"supervised objective has no option(s) {', '.join(sorted(options))}")
        if not 0.0 <= label_smoothing < 1.0:
            raise VitxError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        super().__init__(backbone, num_classes=num_classes, head=head, multilabel=multilabel,
                         label_smoothing=label_smoothing)
        self.num_classes = num_classes
        self.multilabel = multilabel
        self.label_smoothing = label_smoothing
        self.head = build_head(head, backbone.embed_dim, num_classes)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        feats = self.backbone(batch["image"])  # (B, D) pooled [class] token
        logits = self.head(feats).float()  # (B, K)
        labels = batch["label"]
        if self.multilabel:  # labels: (B, K) in {0, 1}
            target = labels.float() * (1 - self.label_smoothing) + 0.5 * self.label_smoothing
            loss = F.binary_cross_entropy_with_logits(logits, target)
            top = logits.argmax(-1)
            top1 = labels.gather(1, top[:, None]).float().mean()  # top prediction is one of the positives
        else:  # labels: (B,) class indices
            loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
            top1 = (logits.argmax(-1) == labels).float().mean()
        return {"loss": loss, "top1": top1.detach()}
