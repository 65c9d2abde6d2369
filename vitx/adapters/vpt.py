"""Visual Prompt Tuning (Jia et al. 2022): the pre-trained backbone stays frozen; `tokens` learned prompt tokens
are inserted after the [class] token, before the first block (shallow), or a fresh set before every block, each
replacing the last block's prompt outputs (deep). The head reads the [class] token as before; the prompts count
as prefix tokens, so a mean over patch tokens leaves them out. Prompts are initialised as VPT's code does
(uniform ± √(6 / (3·P² + D)) for patch size P and width D) and, in training, pass through dropout 0.1 as in VPT's
VTAB runs (github.com/KMnP/vpt, demo.ipynb's VTAB commands: MODEL.PROMPT.DROPOUT 0.1, applied per image to the
expanded prompts, src/models/vit_prompt/vit.py:82, :114; NOAH's VPT script sets the same, --drop_rate_prompt=0.1).

VPT's published VTAB-1k rows choose per task, on val200, the prompt length (1 to 200), and lr × weight decay from
a grid for SGD (tune_vtab.py:245-251; base lr 0.05-50 × batch / 256), 100 epochs with 10 of warm-up; vitx's
defaults are one length (10) and, under `--protocol peft`, NOAH's rerun of VPT (AdamW, lr 1e-3, weight decay
1e-4, batch 64, 100 epochs: `VPT.reference`). `--compare` prints what differs beside the row.

The prompts are backbone weights (`blocks.<i>.vpt_prompt`): a transfer's model.safetensors holds them, and
reading it back (`--from`, `vitx predict`) rebuilds them from the adapter its config.json records (`restore`).
timm's ViT has no place for them, so `vitx export` refuses a prompted model."""
from __future__ import annotations

import math
import types
from typing import Any

import torch
import torch.nn as nn

from ..errors import VitxError
from ..registry import register_adapter
from .base import AdaptContext, Adapter, freeze

KEY = "vpt_prompt"


def _prompt(block: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Forward pre-hook of a prompted block: insert its prompts after the prefix tokens, or replace the previous
    block's prompt outputs with them. x: (B, prefix + N, D) → (B, prefix + p + N, D)."""
    x = args[0]
    prompts = getattr(block, KEY).expand(x.shape[0], -1, -1).to(x.dtype)  # (B, p, D)
    dropout = getattr(block, "vpt_dropout", None)  # [nn.Dropout] held by the model, which sets its mode
    if dropout:
        prompts = dropout[0](prompts)  # a mask per image, as VPT drops its expanded prompts
    after = block.vpt_after
    rest = x[:, after:] if block.vpt_insert else x[:, after + prompts.shape[1]:]
    return (torch.cat([x[:, :after], prompts, rest], dim=1), *args[1:])


MAX_TOKENS = 1024  # prompt tokens: each is a sequence position in every block (memory grows with the square)


@register_adapter("vpt", description="frozen backbone; learned prompt tokens before the first block (shallow) "
                                     "or every block (deep=True); the head trains")
class VPT(Adapter):
    ignores = ("drop_path", "drop_path_mode")  # the frozen backbone stays in eval mode: stochastic depth is off
    ignores_because = "keeps the backbone frozen in eval mode (no stochastic depth)"
    reference = {"lr": 1e-3, "weight_decay": 1e-4, "batch_size": 64, "epochs": 100}
    reference_source = ("NOAH configs/VPT/VTAB/slurm_train_vpt_vtab.sh:12,21,34 (lr 0.001, weight decay 1e-4, batch "
                        "64, 100 epochs; VPT's own runs choose SGD's lr per task)")

    def __init__(self, tokens: int = 10, deep: bool = False, dropout: float = 0.1) -> None:
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 < tokens <= MAX_TOKENS:
            raise VitxError(f"vpt tokens must be an integer from 1 to {MAX_TOKENS} (VPT sweeps up to 200), got "
                            f"{tokens!r}")
        if not isinstance(deep, bool):
            raise VitxError(f"vpt deep must be True or False, got {deep!r}")
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
            raise VitxError(f"vpt dropout must be a number in [0, 1), got {dropout!r}")
        super().__init__(tokens=tokens, deep=deep, dropout=float(dropout))
        self.tokens, self.deep, self.dropout = tokens, deep, float(dropout)

    def restore(self, backbone: nn.Module) -> None:
        """The prompted structure (prompts zero until loaded), to read a saved prompted backbone."""
        blocks = getattr(backbone, "blocks", None)
        if not isinstance(blocks, nn.Sequential) or not hasattr(backbone, "num_prefix_tokens"):
            raise VitxError("vpt needs a ViT backbone with blocks and prefix tokens (timm's VisionTransformer)")
        after, dim = int(backbone.num_prefix_tokens), int(backbone.embed_dim)
        device = backbone.pos_embed.device
        for i, block in enumerate(blocks if self.deep else blocks[:1]):
            setattr(block, KEY, nn.Parameter(torch.zeros(1, self.tokens, dim, device=device)))
            block.vpt_after, block.vpt_insert = after, i == 0
            block.register_forward_pre_hook(_prompt)
        backbone.num_prefix_tokens = after + self.tokens  # pooling and patch means skip the prompts
        record = getattr(backbone, "vitx_record", None)
        if record is not None:  # config.json's backbone record: a saved prompted backbone is rebuilt with them
            backbone.vitx_record = {**record, "prompts": {"tokens": self.tokens, "deep": self.deep}}

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        backbone = model.backbone
        freeze(backbone)
        self.restore(backbone)
        patch = int(backbone.patch_embed.patch_size[0])
        bound = math.sqrt(6.0 / (3 * patch * patch + int(backbone.embed_dim)))
        backbone.vpt_dropout = nn.Dropout(self.dropout)
        # The frozen backbone stays in eval mode (freeze); train()/eval() on it now set its prompts' dropout alone
        backbone.train = types.MethodType(_train_prompt_dropout, backbone)
        for block in backbone.blocks:
            if hasattr(block, KEY):
                nn.init.uniform_(getattr(block, KEY), -bound, bound)
                if self.dropout > 0:
                    block.vpt_dropout = [backbone.vpt_dropout]  # a pointer, not a second registration
        model.head.requires_grad_(True)


def _train_prompt_dropout(backbone: nn.Module, mode: bool = True) -> nn.Module:
    """`train` of a prompted frozen backbone: its blocks stay in eval mode, its prompts' dropout follows `mode` (and
    so does its own flag, which readers such as the monitor restore)."""
    backbone.training = mode
    backbone.vpt_dropout.train(mode)
    return backbone


def restore_prompts(backbone: nn.Module, prompts: dict[str, Any]) -> None:
    """The prompted structure a backbone record names (`{"tokens": p, "deep": bool}`), for its weights to load."""
    try:
        VPT(**prompts).restore(backbone)  # (no dropout: a restored backbone is read, not trained)
    except TypeError:
        raise VitxError(f"the backbone record's prompts {prompts} are not VPT's (tokens, deep)") from None


__all__ = ["KEY", "VPT", "restore_prompts"]
