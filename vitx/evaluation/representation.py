"""What frozen-feature evaluation reads: the pre-logits, as in the paper (§4) and big_vision's few-shot evaluator.

A supervised pre-training head is Linear → tanh → Linear; its first two layers are the "representation layer",
and the pre-logits are the tanh outputs. An objective without such a layer (MPP, MAE, SimCLR, a timm start,
scratch) has pre-logits equal to the backbone's pooled output. `features="backbone"` always takes the backbone's
output instead (the [class] token after the final norm), for comparison with evaluations that do.
`features="patch-mean"` averages the patch tokens after the final norm (MAE's and BEiT's pooling): masked
modelling trains the patch tokens and never the [class] token, whose frozen features can then read worse than
a random network's while fine-tuning from the same weights gains (recipes/reproduction/STUDY.md).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..errors import VitxError
from . import FEATURES

LAYER_KEY = "head.pre_logits.fc"  # the supervised objective's representation layer in heads.safetensors


class Representation(nn.Module):
    """backbone (B, 3, H, W) -> (B, D) pooled, then the representation layer (B, D') when there is one."""

    def __init__(self, backbone: nn.Module, layer: nn.Module | None = None, patch_mean: bool = False) -> None:
        super().__init__()
        self.backbone, self.layer, self.patch_mean = backbone, layer, patch_mean
        self.train(backbone.training)  # a wrapper made mid-training must not change the backbone's mode

    @property
    def kind(self) -> str:
        """One line for reports: which features these are."""
        if self.patch_mean:
            return "patch-mean (the mean of the patch tokens after the final norm)"
        if self.layer is None:
            return "backbone output ([class] token after the final norm)"
        return "pre-logits (after the pre-training head's tanh representation layer)"

    @property
    def embed_dim(self) -> int:
        return int(self.layer[0].out_features) if self.layer is not None else int(self.backbone.embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.patch_mean:
            tokens = self.backbone.forward_features(x)  # (B, prefix + N, D), after the final norm
            return tokens[:, int(getattr(self.backbone, "num_prefix_tokens", 1)):].mean(1)  # (B, D)
        feats = self.backbone(x)  # (B, D)
        return self.layer(feats) if self.layer is not None else feats  # (B, D')


def tanh_layer(weight: torch.Tensor, bias: torch.Tensor) -> nn.Sequential:
    """Linear(D, D') → tanh with the given weights (D', D) and (D',)."""
    fc = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        fc.weight.copy_(weight)
        fc.bias.copy_(bias)
    return nn.Sequential(fc, nn.Tanh())


def read_as(backbone: nn.Module, features: str, layer: nn.Module | None = None) -> Representation:
    """`backbone` read as `features` (one of FEATURES); `layer` is the representation layer that pre-logits
    pass through, when the start has one."""
    if features not in FEATURES:
        raise VitxError(f"--features must be one of {', '.join(FEATURES)}, got '{features}'")
    return Representation(backbone, layer if features == "pre-logits" else None, patch_mean=features == "patch-mean")


__all__ = ["FEATURES", "LAYER_KEY", "Representation", "read_as", "tanh_layer"]
