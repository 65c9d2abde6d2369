"""What frozen-feature evaluation reads: the pre-logits, as in the paper (§4) and big_vision's few-shot evaluator.

A supervised pre-training head is Linear → tanh → Linear; its first two layers are the "representation layer",
and the pre-logits are the tanh outputs. An objective without such a layer (MPP, MAE, SimCLR, a timm start,
scratch) has pre-logits equal to the backbone's pooled output. `features="cls-token"` (formerly "backbone") always
takes the backbone's output instead (the [class] token after the final norm), for comparison with evaluations that do.
`features="patch-mean"` averages the patch tokens after the final norm (MAE's and BEiT's pooling): masked
modelling trains the patch tokens and never the [class] token, whose frozen features can then read worse than
a random network's while fine-tuning from the same weights gains (recipes/reproduction/STUDY.md).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..errors import VitxError
from . import FEATURES, feature_name

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
            return "cls-token (the backbone's output: the [class] token after the final norm)"
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


class Readouts(nn.Module):
    """Every frozen-feature choice of one forward pass, side by side: backbone (B, 3, H, W) -> (B, ΣD), with
    `slices[name]` the columns of each choice. For a linear probe that picks its features on validation
    (DINO's and DINOv2's linear evaluation: the [class] token, with the mean patch token, of the last 1 or n
    blocks; MAE's: the mean patch token), extracted once for all of them.

    cls-token: the backbone's pooled output (the [class] token after the final norm, or the start's own pooling);
    patch-mean: the mean patch token after the final norm; cls-token+patch-mean: both; last<n>: the [class]
    tokens of the last n blocks, each after the final norm; pre-logits: through the supervised representation
    layer, when the start has one."""

    def __init__(self, backbone: nn.Module, layer: nn.Module | None = None, last: int = 4) -> None:
        super().__init__()
        self.backbone, self.layer = backbone, layer
        has_cls = getattr(backbone, "cls_token", None) is not None  # last<n> reads each block's [class] token
        self.last = min(last, len(getattr(backbone, "blocks", ()))) \
            if hasattr(backbone, "forward_intermediates") and has_cls else 0
        dim, widths = int(backbone.embed_dim), {}
        if layer is not None:
            widths["pre-logits"] = int(layer[0].out_features)
        widths.update({"cls-token": dim, "patch-mean": dim})
        if self.last > 1:
            widths[f"last{self.last}"] = self.last * dim
        ends = torch.tensor(list(widths.values())).cumsum(0).tolist()
        self.slices = {name: slice(end - w, end) for (name, w), end in zip(widths.items(), ends)}
        self.slices["cls-token+patch-mean"] = slice(self.slices["cls-token"].start, self.slices["patch-mean"].stop)
        self.train(backbone.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        prefix = int(getattr(self.backbone, "num_prefix_tokens", 1))
        if self.last > 1:
            tokens, blocks = self.backbone.forward_intermediates(  # (B, P + N, D); last n of (B, N, D), (B, P, D)
                x, indices=self.last, return_prefix_tokens=True, norm=True, output_fmt="NLC")
        else:
            tokens, blocks = self.backbone.forward_features(x), []  # (B, P + N, D), after the final norm
        pooled = self.backbone.forward_head(tokens, pre_logits=True)  # (B, D): what backbone(x) returns
        mean = tokens[:, prefix:].mean(1)  # (B, D)
        parts = ([self.layer(pooled)] if self.layer is not None else []) + [pooled, mean]
        parts += [cls[:, 0] for _, cls in blocks] if self.last > 1 else []  # n × (B, D)
        return torch.cat(parts, dim=1)  # (B, ΣD)


def tanh_layer(weight: torch.Tensor, bias: torch.Tensor) -> nn.Sequential:
    """Linear(D, D') → tanh with the given weights (D', D) and (D',)."""
    fc = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        fc.weight.copy_(weight)
        fc.bias.copy_(bias)
    return nn.Sequential(fc, nn.Tanh())


def read_as(backbone: nn.Module, features: str, layer: nn.Module | None = None) -> Representation:
    """`backbone` read as `features` (one of FEATURES, or a former name of one: a plugin's objective may still
    declare "backbone"); `layer` is the representation layer that pre-logits pass through, when the start has one."""
    features = feature_name(features)
    if features not in FEATURES:
        raise VitxError(f"--features must be one of {', '.join(FEATURES)}, got '{features}'")
    return Representation(backbone, layer if features == "pre-logits" else None, patch_mean=features == "patch-mean")


__all__ = ["FEATURES", "LAYER_KEY", "Readouts", "Representation", "read_as", "tanh_layer"]
