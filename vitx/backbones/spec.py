"""A backbone described as data: which timm architecture it is and the arguments that make it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import VitxError

if TYPE_CHECKING:
    import torch.nn as nn


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
    resnet_layers: tuple[int, ...] = ()  # a hybrid's ResNet stages (blocks per stage), before the ViT
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

    def build(self, **overrides: Any) -> "nn.Module":
        import timm  # seconds to import: only when a network is built

        args = self.timm_kwargs(**overrides)
        check_image_size(args["img_size"], args.get("patch_size", self.stride or self.patch))
        return timm.create_model(self.timm_arch, pretrained=False, **args)

    def num_parameters(self, img_size: int | None = None) -> int:
        """The parameter count, from the table row alone (no torch): `vitx models` lists it without building
        anything. Tested equal to the built network's count for every registered spec."""
        side = img_size or self.img_size
        d, m, tokens = self.width, self.mlp, (side // (self.stride or self.patch)) ** 2
        if self.resnet_layers:  # ResNetV2 stem and bottleneck stages (GroupNorm), then a 1x1 projection
            stem, width = 3 * 64 * 7 * 7 + 2 * 64, 64
            params = stem
            for i, blocks in enumerate(self.resnet_layers):
                out = 256 * 2 ** i
                mid = out // 4
                params += width * out + 2 * out  # downsampling shortcut, first block
                for b in range(blocks):
                    params += (width if b == 0 else out) * mid + 9 * mid * mid + mid * out + 2 * (2 * mid + out)
                width = out
            params += width * d + d  # HybridEmbed's 1x1 projection
        else:
            params = 3 * self.patch ** 2 * d + d  # patch embedding: a p×p conv with bias
        params += d + (tokens + 1) * d  # [class] token, position embeddings
        params += self.depth * (4 * d * d + 2 * d * m + 9 * d + m)  # blocks: LN, qkv, proj, LN, MLP
        return params + 2 * d  # final LayerNorm


def check_image_size(img_size: int | tuple[int, int], patch: int) -> None:
    """Every side must be a whole number of patches: the paper's ViT has no padding."""
    sides = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    for side in sides:
        if side <= 0 or side % patch:
            raise VitxError(f"image size {side} is not divisible by the patch size {patch}; "
                            f"use a multiple of {patch} (e.g. {max(patch, round(side / patch) * patch)})")
