"""SSF (Lian et al. 2022, "Scaling & Shifting Your Features"): the pre-trained backbone stays frozen; after each
of its linear maps and normalisations (patch embedding, norm1, qkv, proj, norm2, fc1, fc2, the final norm) a
learned per-channel scale γ and shift β follow, y = γ ⊙ f(x) + β, initialised near identity (γ ~ N(1, 0.02²),
β ~ N(0, 0.02²), as SSF's code). The task head trains.

Each γ, β folds into the layer before it when the model is saved (W' = diag(γ) W, b' = γ ⊙ b + β), so a
transfer's model.safetensors is a plain backbone that loads anywhere; the training state keeps them apart.

SSF's VTAB-1k scripts (github.com/dongzelian/SSF, train_scripts/vit/vtab/<task>/train_ssf.sh) all train 100 epochs
(10 of warm-up) with AdamW on 2 processes of 32 images (a global batch of 64; timm's train.py does not rescale the
lr), no augmentation, and tune lr, weight decay and drop-path per task: lr 5e-3 in 10 of the 19 (1e-3 to 5e-2 in
the others), weight decay 5e-5 in 14 (5e-2 in 5), drop-path 0 in 9 (0.1 or 0.2 in the others). `--protocol peft`
takes lr 5e-3 and weight decay 5e-5 from them (`SSF.reference`); a task's own values are set with --lr,
--weight-decay and --drop-path."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from ..errors import VitxError
from ..registry import register_adapter
from .base import AdaptContext, Adapter

TARGETS = ("patch_embed.proj", "norm1", "qkv", "proj", "norm2", "fc1", "fc2", "norm")


def _scale_shift(module: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
    """Forward hook: γ ⊙ out + β over the channel dimension (dim 1 of a convolution's (B, C, H, W), else last)."""
    shape = (-1, 1, 1) if isinstance(module, nn.Conv2d) else (-1,)
    return out * module.ssf_scale.view(shape).to(out.dtype) + module.ssf_shift.view(shape).to(out.dtype)


def fold_ssf(state: dict[str, torch.Tensor], prefix: str) -> None:
    """Fold γ and β into the layer's own weight and bias (`checkpoint.export_state` calls it when saving); `apply`
    adapts only layers that have both."""
    if not state:  # a process that holds no weights (sharded saves gather them on one)
        return
    scale, shift = state.pop(f"{prefix}ssf_scale"), state.pop(f"{prefix}ssf_shift")
    weight, bias = state[f"{prefix}weight"], state.get(f"{prefix}bias")
    if bias is None:
        raise RuntimeError(f"SSF export: {prefix[:-1]} has no bias to hold its shift")
    state[f"{prefix}weight"] = (weight.float() * scale.float().view(-1, *[1] * (weight.dim() - 1))).to(weight.dtype)
    state[f"{prefix}bias"] = (bias.float() * scale.float() + shift.float()).to(bias.dtype)


@register_adapter("ssf", description="frozen backbone; a trainable scale and shift after each linear map and "
                                     "norm (SSF; folded into the saved weights)")
class SSF(Adapter):
    reference = {"lr": 5e-3, "weight_decay": 5e-5, "batch_size": 64, "epochs": 100}
    reference_source = ("SSF train_scripts/vit/vtab/cifar_100/train_ssf.sh:1-6 (lr 5e-3, weight decay 5e-5, 2 "
                        "processes × batch 32, 100 epochs: the lr of 10 of its 19 VTAB scripts, the weight decay of "
                        "14, the batch and epochs of all)")

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        model.requires_grad_(False)
        adapted = 0
        for name, module in model.backbone.named_modules():
            if not (name == "patch_embed.proj" or name.rpartition(".")[2] in TARGETS) or \
                    not isinstance(module, (nn.Linear, nn.LayerNorm, nn.Conv2d)) or \
                    getattr(module, "bias", None) is None:  # no bias to fold the shift into (a LayerNorm without affine)
                continue
            channels = module.out_channels if isinstance(module, nn.Conv2d) else \
                module.out_features if isinstance(module, nn.Linear) else module.normalized_shape[0]
            device = next(module.parameters()).device
            module.ssf_scale = nn.Parameter(torch.normal(1.0, 0.02, (channels,), device=device))
            module.ssf_shift = nn.Parameter(torch.normal(0.0, 0.02, (channels,), device=device))
            module.register_forward_hook(_scale_shift)
            module.vitx_export = fold_ssf
            adapted += 1
        if adapted == 0:
            raise VitxError("ssf found none of its layers (patch_embed.proj, norm1, qkv, proj, norm2, fc1, fc2, norm) "
                            "in the backbone")
        model.head.requires_grad_(True)


__all__ = ["SSF", "fold_ssf"]
