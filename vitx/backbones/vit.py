"""The paper's ViT variants (Table 1, plus DeiT/AugReg Ti and S) and CPU-sized ones for the embedded demos.

All are timm `VisionTransformer`s: [class] token, learnable 1D position embeddings, pre-LN blocks with a GELU
MLP, and a final LayerNorm; fused attention (scaled_dot_product_attention) and gradient checkpointing come
from timm, and the weights use timm's key names."""
from __future__ import annotations

from ..registry import BACKBONES
from .spec import BackboneSpec

# name → (timm twin, layers, width, MLP, heads, patch, default image size)
VARIANTS: dict[str, tuple[str, int, int, int, int, int, int]] = {
    "vit-ti/16": ("vit_tiny_patch16_224", 12, 192, 768, 3, 16, 224),
    "vit-s/16": ("vit_small_patch16_224", 12, 384, 1536, 6, 16, 224),
    "vit-s/32": ("vit_small_patch32_224", 12, 384, 1536, 6, 32, 224),
    "vit-b/16": ("vit_base_patch16_224", 12, 768, 3072, 12, 16, 224),
    "vit-b/32": ("vit_base_patch32_224", 12, 768, 3072, 12, 32, 224),
    "vit-b/8": ("vit_base_patch8_224", 12, 768, 3072, 12, 8, 224),
    "vit-l/16": ("vit_large_patch16_224", 24, 1024, 4096, 16, 16, 224),
    "vit-l/32": ("vit_large_patch32_224", 24, 1024, 4096, 16, 32, 224),
    "vit-h/14": ("vit_huge_patch14_224", 32, 1280, 5120, 16, 14, 224),
    # CPU-sized, for the embedded data: 4x4 patches, 64 tokens at 32px (16 tokens at 16px for the nano demo).
    "vit-ti/4": ("vit_tiny_patch16_224", 12, 192, 768, 3, 4, 32),
    "vit-micro/4": ("vit_tiny_patch16_224", 6, 128, 512, 4, 4, 32),
    "vit-nano/4": ("vit_tiny_patch16_224", 4, 64, 256, 2, 4, 16),
}

for _name, (_arch, _depth, _width, _mlp, _heads, _patch, _size) in VARIANTS.items():
    BACKBONES.register(_name, BackboneSpec(_arch, _depth, _width, _mlp, _heads, _patch, _size),
                       description=f"ViT {_depth} layers, width {_width}, patch {_patch}, {_size}px")
