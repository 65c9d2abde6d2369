"""MAE as a vitx objective: mask 75% of the patches, encode the visible 25% only, reconstruct the normalised
pixels of the masked patches with a light decoder (He et al. 2022), on lightly's `MaskedVisionTransformerTIMM`
(the encoder) and `MaskedVisionTransformerDecoderTIMM` (the decoder's [mask] token, sine-cosine positions,
blocks and norm), with the embedding into the decoder and the pixel prediction as two linear layers here.

The encoder is the vitx backbone itself, so the checkpoint's model.safetensors is a plain backbone that loads
wherever any other vitx checkpoint does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from vitx import Objective, VitxError, option, register_objective

# weight names of the deprecated MAEDecoderTIMM, which vitx-mae used before lightly 1.6 (a different layout and
# parameter order, so the optimiser state of such a run does not fit this one either)
OLD_DECODER = ("decoder.decoder_embed.", "decoder.decoder_pos_embed", "decoder.decoder_blocks.", "decoder.decoder_pred.")


@dataclass
class MAEOptions:
    mask_ratio: float = option(0.75, "Share of each image's patches masked (MAE's 75%); the encoder sees the rest.",
                               above=0, below=1)
    decoder_dim: int = option(512, "Width of the light decoder (MAE's 512).", min=1, max=8192)
    decoder_depth: int = option(8, "Blocks of the decoder (MAE's 8).", min=1, max=64)
    decoder_heads: int = option(16, "Attention heads of the decoder (MAE's 16); they divide decoder_dim.", min=1,
                                max=256)
    norm_pix_loss: bool = option(True, "Reconstruct each patch's pixels normalised by their own mean and variance "
                                 "(MAE's norm_pix_loss).")


@register_objective("mae", description="masked autoencoder (lightly): 75% masked, MSE on normalised pixels")
class MAE(Objective):
    features = "patch-mean"  # it encodes and reconstructs patches; the [class] token is never trained
    # main_pretrain.py's run as PRETRAIN.md launches it (facebookresearch/mae; docs/recipes.md gives each line):
    # AdamW β (0.9, 0.95), blr 1.5e-4 × batch / 256 warmed up from 0 and cosine to min_lr 0 per iteration
    # (util/lr_sched.py), weight decay 0.05 on all but biases and 1-D parameters (add_weight_decay), no gradient
    # clipping (engine_pretrain.py), random resized crops of scale 0.2–1
    recipe = {"optimizer": "adamw", "betas": [0.9, 0.95], "blr": 1.5e-4, "warmup_start": "zero", "schedule": "cosine",
              "min_lr": 0.0, "weight_decay": 0.05, "decay_tokens": True, "grad_clip": 0.0, "crop_scale": 0.2}
    Options = MAEOptions

    def __init__(self, backbone: nn.Module, **options: Any) -> None:
        super().__init__(backbone, **options)
        o = self.settings
        mask_ratio, decoder_dim, decoder_depth, decoder_heads = (o.mask_ratio, o.decoder_dim, o.decoder_depth,
                                                                 o.decoder_heads)
        if decoder_dim % decoder_heads:
            raise VitxError(f"mae decoder_heads {decoder_heads} must divide decoder_dim {decoder_dim}")
        # lightly (and torchvision through it) takes seconds to import: only when an MAE is built, not when
        # `vitx objectives` lists this plugin
        from lightly.models import utils
        from lightly.models.modules import MaskedVisionTransformerDecoderTIMM, MaskedVisionTransformerTIMM
        from lightly.models.modules.masked_vision_transformer_timm import init_weights

        self.mask_ratio, self.norm_pix_loss = mask_ratio, o.norm_pix_loss
        # lightly's masked ViT wraps the backbone (MAE weight init, sine-cosine position init). It is kept out of
        # the module tree on purpose: its `vit` *is* self.backbone (saved once, under backbone.*), and its own
        # [mask] token is never used when only visible patches are encoded (an unused parameter breaks DDP).
        object.__setattr__(self, "encoder", MaskedVisionTransformerTIMM(vit=backbone))
        self.patch_size = int(backbone.patch_embed.patch_size[0])
        self.prefix = int(backbone.num_prefix_tokens)
        self.decoder_embed = nn.Linear(backbone.embed_dim, decoder_dim)
        self.decoder = MaskedVisionTransformerDecoderTIMM(
            num_patches=backbone.patch_embed.num_patches, embed_dim=decoder_dim, depth=decoder_depth,
            num_heads=decoder_heads, num_prefix_tokens=self.prefix, initialize_weights=False)
        self.decoder_pred = nn.Linear(decoder_dim, self.patch_size ** 2 * 3)
        # initialised in the order MAEDecoderTIMM used, so a seed gives the weights it gave before
        nn.init.normal_(self.decoder.mask_token, std=0.02)
        utils.initialize_2d_sine_cosine_positional_embedding(pos_embedding=self.decoder.pos_embed,
                                                             num_prefix_tokens=self.prefix)
        for part in (self.decoder_embed, self.decoder.blocks, self.decoder.norm, self.decoder_pred):
            part.apply(init_weights)
        self._register_load_state_dict_pre_hook(_refuse_old_layout)

    def init_parts(self) -> dict[str, tuple[str, ...]]:
        """`--from` of an MAE run continues its decoder with its encoder (a new decoder undoes the reconstruction)."""
        return {"decoder": ("decoder_embed.", "decoder.", "decoder_pred.")}

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        from lightly.models import utils

        images = batch["image"]  # (B, 3, H, W)
        b, seq = images.shape[0], self.encoder.sequence_length
        idx_keep, idx_mask = utils.random_token_mask(size=(b, seq), mask_ratio=self.mask_ratio, device=images.device)
        encoded = self.encoder.encode(images=images, idx_keep=idx_keep)  # (B, prefix + visible, D)
        tokens = utils.repeat_token(self.decoder.mask_token, (b, seq))  # (B, seq, Dd) all [mask]
        tokens = utils.set_at_index(tokens, idx_keep, self.decoder_embed(encoded).type_as(tokens))
        decoded = self.decoder(tokens)  # + positions, blocks, norm: (B, seq, Dd)
        pred = self.decoder_pred(utils.get_at_index(decoded, idx_mask))  # (B, masked, P²·3)
        target = utils.get_at_index(utils.patchify(images, self.patch_size), idx_mask - self.prefix)
        if self.norm_pix_loss:
            target = utils.normalize_mean_var(target, dim=-1)
        return {"loss": F.mse_loss(pred.float(), target.float())}


def _refuse_old_layout(state_dict: dict[str, torch.Tensor], prefix: str, *args: Any) -> None:
    """Load-time hook: a run written with the deprecated decoder stops in one line, not a key-mismatch trace."""
    if any(k[len(prefix):].startswith(OLD_DECODER) for k in state_dict if k.startswith(prefix)):
        raise VitxError("this MAE run was written by an older vitx-mae (lightly's deprecated MAEDecoderTIMM); its "
                        "decoder cannot be resumed here: start a new run (its model.safetensors backbone still "
                        "loads and transfers as it is)")
