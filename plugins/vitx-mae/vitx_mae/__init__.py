"""MAE as a vitx objective: mask 75% of the patches, encode the visible 25% only, reconstruct the normalised
pixels of the masked patches with a light decoder (He et al. 2022), on lightly's `MaskedVisionTransformerTIMM`
and `MAEDecoderTIMM`.

The encoder is the vitx backbone itself, so the checkpoint's model.safetensors is a plain backbone that loads
wherever any other vitx checkpoint does.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from vitx import Objective, VitxError, register_objective


@register_objective("mae", description="masked autoencoder (lightly): 75% masked, MSE on normalised pixels")
class MAE(Objective):
    def __init__(self, backbone: nn.Module, mask_ratio: float = 0.75, decoder_dim: int = 512, decoder_depth: int = 8,
                 decoder_heads: int = 16, norm_pix_loss: bool = True, **options: Any) -> None:
        if options:
            raise VitxError(f"mae has no option(s) {', '.join(sorted(options))}")
        if not 0.0 < mask_ratio < 1.0:
            raise VitxError(f"mae mask_ratio must be in (0, 1), got {mask_ratio}")
        # lightly (and torchvision through it) takes seconds to import: only when an MAE is built, not when
        # `vitx objectives` lists this plugin
        from lightly.models.modules import MAEDecoderTIMM, MaskedVisionTransformerTIMM

        super().__init__(backbone, mask_ratio=mask_ratio, decoder_dim=decoder_dim, decoder_depth=decoder_depth,
                         decoder_heads=decoder_heads, norm_pix_loss=norm_pix_loss)
        self.mask_ratio, self.norm_pix_loss = mask_ratio, norm_pix_loss
        # lightly's masked ViT wraps the backbone (MAE weight init, sine-cosine position init). It is kept out of
        # the module tree on purpose: its `vit` *is* self.backbone (saved once, under backbone.*), and its own
        # [mask] token is never used when only visible patches are encoded (an unused parameter breaks DDP).
        object.__setattr__(self, "encoder", MaskedVisionTransformerTIMM(vit=backbone))
        self.patch_size = int(backbone.patch_embed.patch_size[0])
        self.prefix = int(backbone.num_prefix_tokens)
        self.decoder = MAEDecoderTIMM(
            num_patches=backbone.patch_embed.num_patches, patch_size=self.patch_size, embed_dim=backbone.embed_dim,
            decoder_embed_dim=decoder_dim, decoder_depth=decoder_depth, decoder_num_heads=decoder_heads,
            num_prefix_tokens=self.prefix)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        from lightly.models import utils

        images = batch["image"]  # (B, 3, H, W)
        b, seq = images.shape[0], self.encoder.sequence_length
        idx_keep, idx_mask = utils.random_token_mask(size=(b, seq), mask_ratio=self.mask_ratio, device=images.device)
        encoded = self.encoder.encode(images=images, idx_keep=idx_keep)  # (B, prefix + visible, D)
        tokens = utils.repeat_token(self.decoder.mask_token, (b, seq))  # (B, seq, Dd) all [mask]
        tokens = utils.set_at_index(tokens, idx_keep, self.decoder.embed(encoded).type_as(tokens))
        pred = self.decoder.predict(utils.get_at_index(self.decoder.decode(tokens), idx_mask))  # (B, masked, P²·3)
        target = utils.get_at_index(utils.patchify(images, self.patch_size), idx_mask - self.prefix)
        if self.norm_pix_loss:
            target = utils.normalize_mean_var(target, dim=-1)
        return {"loss": F.mse_loss(pred.float(), target.float())}
