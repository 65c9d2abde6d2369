"""LoRA as a vitx transfer method (Hu et al. 2021): the pre-trained backbone stays frozen; each adapted projection
W learns a low-rank update, W x + (alpha / r) · B A dropout(x), with A (r × in) and B (out × r). The task head
trains as usual.

The default is the published VTAB-1k LoRA-8 as NOAH (Zhang et al. 2022, github.com/ZhangYuanhan-AI/NOAH) runs it,
the source of the row that the PEFT tables after it reprint (V-PETL Bench included: 0.29M parameters on ViT-B/16):
rank 8 on the fused attention `qkv` of every block, alpha = rank (NOAH scales nothing), dropout 0.1 on the low-rank
path's input, 12 × 8 × (768 + 2304) = 294,912 parameters on B/16. `targets='qkv,proj'` adapts the attention
output too (442,368 on B/16), `'qkv,proj,fc1,fc2'` the MLPs as well.

Initialisation (`init`), each as its source's code does it:
  noah           A and B ~ N(0, 0.02²) (truncated at ±2, timm's trunc_normal_): NOAH's VTAB script builds its
                 ViT with LoRA_a = nn.Linear(768, r) and LoRA_b = nn.Linear(r, 2304), then the ViT's own
                 init_weights re-initialises every nn.Linear, those two included (supernet_train_prompt.py:21-23 →
                 model/supernet_vision_transformer_timm.py:225-228, :462, :531, :686). B is not zero: the run
                 starts within ~1e-3 (the std of B A's entries) of the pre-trained weights, not at them.
  peft           loralib's and HF PEFT's: A = kaiming_uniform_(a=√5) on its (r × in) layout, U(±1/√in), std
                 1/√(3·in) (0.021 at in = 768); B = 0, so training starts exactly at the pre-trained model
                 (microsoft/LoRA loralib/layers.py:124-125).
  noah-supernet  NOAH's supernet module (model/module/qkv_super_prompt.py:28-30), which no script of NOAH's
                 imports: A stored as (in × r), so kaiming_uniform_ takes fan_in = r: U(±1/√r), std 1/√(3r)
                 (0.204 at r = 8); B = 0.

Under `--protocol peft` the method's reference settings (`LoRA.reference`: NOAH's LoRA VTAB script, lr 1e-3 and
the drop-path 0.1 it keeps) fill what the command line leaves unset.

Saving folds B A into W (`vitx_export`), so a transfer's model.safetensors is a plain backbone that loads like
any other vitx checkpoint; the training state kept for --resume holds A and B apart.

    vitx transfer --task vtab/dsprites_loc --protocol peft --adapter 'lora(rank=8)'
"""
from __future__ import annotations

import math
import torch
import torch.nn as nn
import torch.nn.functional as F

from vitx import VitxError, register_adapter
from vitx.adapters import AdaptContext, Adapter


# How A and B start (the module docstring says where each comes from)
INITS = ("noah", "peft", "noah-supernet")


def init_factors(a: torch.Tensor, b: torch.Tensor, init: str) -> None:
    """Fill A (r, in) and B (out, r) in place as `init`'s source does."""
    if init == "noah":  # timm's _init_vit_weights over every nn.Linear of NOAH's ViT, its LoRA pair included
        nn.init.trunc_normal_(a, std=0.02, a=-2.0, b=2.0)
        nn.init.trunc_normal_(b, std=0.02, a=-2.0, b=2.0)
        return
    # peft: fan_in = in on the (r, in) layout; noah-supernet: the same call on NOAH's (in, r) layout, fan_in = r
    nn.init.kaiming_uniform_(a if init == "peft" else a.T, a=math.sqrt(5))
    nn.init.zeros_(b)


class LoRALinear(nn.Linear):
    """A frozen `nn.Linear` plus a trainable rank-`rank` update; keeps the layer's own `weight`/`bias` keys."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, init: str = "noah", dropout: float = 0.0) -> None:
        super().__init__(base.in_features, base.out_features, bias=base.bias is not None,
                         device=base.weight.device, dtype=base.weight.dtype)
        self.load_state_dict(base.state_dict())
        self.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, self.in_features, device=self.weight.device))
        self.lora_b = nn.Parameter(torch.empty(self.out_features, rank, device=self.weight.device))
        init_factors(self.lora_a.data, self.lora_b.data, init)
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()  # on the low-rank path alone

    def delta(self) -> torch.Tensor:
        return (self.lora_b @ self.lora_a) * self.scale  # (out, in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        low = F.linear(self.lora_dropout(x), self.lora_a.to(x.dtype))  # (..., r)
        low_rank = F.linear(low, self.lora_b.to(x.dtype))  # (..., out)
        return F.linear(x, self.weight, self.bias) + low_rank * self.scale

    def vitx_export(self, state: dict[str, torch.Tensor], prefix: str) -> None:
        """Publish W + (alpha / r) · B A under the plain layer's key; drop the factors."""
        if not state:  # a process that holds no weights (sharded saves gather them on one)
            return
        a, b = state.pop(f"{prefix}lora_a", None), state.pop(f"{prefix}lora_b", None)
        if a is None or b is None or f"{prefix}weight" not in state:
            raise RuntimeError(f"LoRA export: no {prefix}lora_a/lora_b/weight in the state being saved; the saved "
                               "backbone would not hold the trained update")
        weight = state[f"{prefix}weight"]
        state[f"{prefix}weight"] = (weight.float() + (b.float() @ a.float()) * self.scale).to(weight.dtype)


MAX_RANK = 4096  # above any layer's width in the registered ViTs (H/14: 1,280; its MLP 5,120 in, 1,280 out)


@register_adapter("lora", description="frozen backbone; trainable rank-r updates of the fused attention qkv, as "
                                      "NOAH runs the published LoRA-8 (targets='qkv,proj' adds proj; init='peft' is "
                                      "loralib's), merged into the saved weights")
class LoRA(Adapter):
    role = "method"
    # What the published row's setup sets beyond the peft preset's shared settings: `--protocol peft` takes these
    # when the command line leaves them unset (vitx/transfer/config.py, with_protocol)
    reference = {"lr": 1e-3, "weight_decay": 1e-4, "batch_size": 64, "epochs": 100, "drop_path": 0.1}
    reference_source = ("NOAH configs/LoRA/VTAB/slurm_train_lora_vtab.sh:12,22,36 (weight decay 1e-4, lr 0.001, "
                        "batch 64, 100 epochs) and supernet_train_prompt.py:59 (drop-path 0.1, which the script keeps)")

    def __init__(self, rank: int = 8, alpha: float | None = None, targets: str = "qkv", init: str = "noah",
                 dropout: float = 0.1) -> None:
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 < rank <= MAX_RANK:
            raise VitxError(f"lora rank must be an integer from 1 to {MAX_RANK}, got {rank!r}")
        if alpha is not None and (not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha <= 0
                                  or not math.isfinite(alpha)):
            raise VitxError(f"lora alpha must be a positive finite number, got {alpha!r}")
        names = tuple(t.strip() for t in str(targets).split(",") if t.strip())
        if not names:
            raise VitxError("lora targets is empty; name the Linear layers to adapt, e.g. targets='qkv,proj'")
        if init not in INITS:
            raise VitxError(f"lora init must be one of {', '.join(INITS)} (noah: as NOAH's VTAB runs, the default; "
                            f"peft: loralib's and HF PEFT's, B = 0), got {init!r}")
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout < 1:
            raise VitxError(f"lora dropout must be a number in [0, 1), got {dropout!r}")
        alpha = float(rank if alpha is None else alpha)
        super().__init__(rank=rank, alpha=alpha, targets=",".join(names), init=init, dropout=float(dropout))
        self.rank, self.alpha, self.targets, self.init, self.dropout = rank, alpha, names, init, float(dropout)

    def apply(self, model: nn.Module, ctx: AdaptContext) -> None:
        linears = {name: module for name, module in model.backbone.named_modules() if type(module) is nn.Linear}
        targets = [(name, module) for name, module in linears.items() if name.rpartition(".")[2] in self.targets]
        found = {name.rpartition(".")[2] for name, _ in targets}
        unknown = [t for t in self.targets if t not in found]
        if unknown:  # (a typo beside a good name would otherwise train the good one alone, unsaid)
            names = ", ".join(dict.fromkeys(n.rpartition(".")[2] for n in linears))
            raise VitxError(f"lora targets: no nn.Linear of the backbone is named {unknown[0]} (its names: {names})")
        for name, module in targets:  # all checked before any is changed
            width = min(module.in_features, module.out_features)
            if self.rank >= width:  # B A would then be any matrix, with more parameters than the layer's own
                raise VitxError(f"lora rank {self.rank} is not below the width of {name} ({module.in_features} in, "
                                f"{module.out_features} out): the update would not be low-rank; give rank below "
                                f"{width}")
        model.requires_grad_(False)
        for name, module in targets:
            parent_name, _, child = name.rpartition(".")
            parent = model.backbone.get_submodule(parent_name) if parent_name else model.backbone
            setattr(parent, child, LoRALinear(module, self.rank, self.alpha, self.init, self.dropout))
        model.head.requires_grad_(True)


__all__ = ["INITS", "LoRA", "LoRALinear", "init_factors"]
