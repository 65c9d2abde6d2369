"""The paper's hybrid: ViT-B on 1x1 patches of a ResNet-50 feature map (§3.1, "Hybrid Architecture").

The ResNet keeps stages 1-3 with (3, 4, 9) blocks (stage 4 removed, its layers moved to stage 3), so tokens
come at stride 16. timm's `vit_base_r50_s16_224` is that network (GroupNorm + weight-standardised convs)."""
from __future__ import annotations

from ..registry import BACKBONES
from .spec import BackboneSpec

BACKBONES.register("r50+vit-b/16", BackboneSpec("vit_base_r50_s16_224", 12, 768, 3072, 12, patch=1, stride=16,
                                                img_size=224, resnet_layers=(3, 4, 9)),
                   description="R50 (stages 3,4,9) feature map at stride 16, 1x1 patches, ViT-B")
