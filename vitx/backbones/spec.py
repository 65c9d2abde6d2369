"""A backbone described as data: which timm architecture it is and the arguments that make it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import timm
import torch.nn as nn

from ..errors import VitxError


@dataclass(frozen=True)
class BackboneSpec:
    """The paper's table row for one ViT, realised as a timm `VisionTransformer`.

    `timm_arch` names the timm registration it is built from; `kwargs` override that registration's
    arguments, so `timm.create_model(timm_arch, **kwargs)` builds the same network (config.json records both).
    """

    timm_arch: str
    depth: int
    width: int
    mlp: int
    heads: int
    patch: int
    img_size: int = 224
    stride: int | None = None  # pixels per token when it differs from `patch` (hybrids)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def timm_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Arguments for `timm.create_model(self.timm_arch, **...)`; the backbone has no head by default."""
        args: dict[str, Any] = dict(
            img_size=self.img_size,
            embed_dim=self.width,
            depth=self.depth,
            num_heads=self.heads,
            mlp_ratio=self.mlp / self.width,
            num_classes=0,
            weight_init="jax",  # the paper's initialisation (lecun-normal patches, zero head), via timm
        )
        if self.stride is None:
            args["patch_size"] = self.patch
        args.update(self.kwargs)
        args.update(overrides)
        return args

    def build(self, **overrides: Any) -> nn.Module:
        args = self.timm_kwargs(**overrides)
        check_image_size(args["img_size"], args.get("patch_size", self.stride or self.patch))
        return timm.create_model(self.timm_arch, pretrained=False, **args)


def check_image_size(img_size: int | tuple[int, int], patch: int) -> None:
    """Every side must be a whole number of patches: the paper's ViT has no padding."""
    sides = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    for side in sides:
        if side <= 0 or side % patch:
            raise VitxError(f"image size {side} is not divisible by the patch size {patch}; "
                            f"use a multiple of {patch} (e.g. {max(patch, round(side / patch) * patch)})")
