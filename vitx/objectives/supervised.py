"""Supervised classification: softmax cross-entropy (sigmoid for multi-label), optional label smoothing, and
timm's Mixup/CutMix for from-scratch training on small data (the regularisation DeiT showed ViTs need there)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import VitxError
from ..heads import build_head
from ..registry import register_objective
from .base import Objective
from .options import option

HEADS = ("mlp", "linear")  # heads.build_head's


@dataclass
class SupervisedOptions:
    head: str = option("mlp", "The pre-training head: the paper's MLP with one tanh hidden layer, or one linear layer.",
                       choices=HEADS)
    multilabel: bool = option(False, "Several labels per image: sigmoid cross-entropy instead of softmax.")
    label_smoothing: float = option(0.0, "Label smoothing of the targets.", min=0, below=1)
    mixup: float = option(0.0, "timm's Mixup Beta alpha (0: off), for from-scratch training on small data (DeiT).",
                          min=0)
    cutmix: float = option(0.0, "timm's CutMix Beta alpha (0: off).", min=0)
    mix_prob: float = option(1.0, "Probability of mixing a batch, when mixup or cutmix is on.", min=0, max=1)
    switch_prob: float = option(0.5, "Probability of CutMix instead of Mixup when both are on.", min=0, max=1)


@register_objective("supervised", description="classification: softmax (or sigmoid) cross-entropy on the [class] token")
class Supervised(Objective):
    """Classify the pooled [class] representation with the paper's pre-training head."""

    needs_labels = True
    Options = SupervisedOptions
    # the ViT paper's pre-training (Appendix B.1, big_vision; docs/recipes.md): Adam β (0.9, 0.999) with decoupled
    # weight decay 0.1 on kernels only, global-norm clip 1, a warm-up from 0. Not its: cosine decay (it decays
    # linearly: recipes/paper/pretrain-supervised-b16.toml sets `schedule = "linear"`)
    recipe = {"optimizer": "adamw", "betas": [0.9, 0.999], "weight_decay": 0.1, "decay_tokens": False,
              "grad_clip": 1.0, "grad_clip_mode": "global", "warmup_start": "zero"}

    def __init__(self, backbone: nn.Module, num_classes: int, **options: Any) -> None:
        super().__init__(backbone, **options)
        o = self.settings
        head, multilabel, label_smoothing = o.head, o.multilabel, o.label_smoothing
        mixup, cutmix, mix_prob, switch_prob = o.mixup, o.cutmix, o.mix_prob, o.switch_prob
        if (mixup or cutmix) and multilabel:
            raise VitxError("supervised mixup/cutmix is for single-label classification")
        self.num_classes, self.multilabel, self.label_smoothing = num_classes, multilabel, label_smoothing
        self.head = build_head(head, backbone.embed_dim, num_classes)
        self.mix = None
        if mixup or cutmix:  # timm's Mixup: its Beta draws come from NumPy, which the runner seeds per micro-step
            from timm.data import Mixup
            from timm.loss import SoftTargetCrossEntropy

            self.soft_loss = SoftTargetCrossEntropy()
            self.mix = Mixup(mixup_alpha=mixup, cutmix_alpha=cutmix, prob=mix_prob, switch_prob=switch_prob,
                             label_smoothing=label_smoothing, num_classes=num_classes)

    sized_by_data = ("classifier",)  # its classes are the data's: another data set's starts new, said

    def representation_layer(self) -> nn.Module | None:
        return getattr(self.head, "pre_logits", None)  # the tanh MLP head's; a linear head has none

    def init_parts(self) -> dict[str, tuple[str, ...]]:
        """`--from` of a supervised run continues its head with the backbone: the pre-logits layer (the MLP head's
        Linear → tanh, the representation few-shot evaluation reads) and the classifier, which starts new where this
        run's data has another number of classes."""
        if self.representation_layer() is None:  # a linear head: the classifier alone
            return {"classifier": ("head.",)}
        return {"pre-logits": ("head.pre_logits.",), "classifier": ("head.fc.",)}

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        images, labels = batch["image"], batch["label"]  # (B, 3, H, W), (B,) or (B, K)
        mixing = self.mix is not None and self.training
        if mixing:
            if images.shape[0] % 2:
                raise VitxError(f"supervised mixup/cutmix needs an even batch per process, got {images.shape[0]}")
            images, labels = self.mix(images, labels)  # mixed images, (B, K) mixed and smoothed targets
        logits = self.head(self.backbone(images)).float()  # (B, K) from the pooled [class] token (B, D)
        if mixing:
            loss = self.soft_loss(logits, labels)
            top1 = (logits.argmax(-1) == labels.argmax(-1)).float().mean()  # against each image's larger share
        elif self.multilabel:  # labels: (B, K) in {0, 1}
            target = labels.float() * (1 - self.label_smoothing) + 0.5 * self.label_smoothing
            loss = F.binary_cross_entropy_with_logits(logits, target)
            top1 = labels.gather(1, logits.argmax(-1)[:, None]).float().mean()  # top prediction is one of the positives
        else:  # labels: (B,) class indices
            loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
            top1 = (logits.argmax(-1) == labels).float().mean()
        return {"loss": loss, "top1": top1.detach()}
