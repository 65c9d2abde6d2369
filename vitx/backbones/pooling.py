"""What a backbone's pooled output (`backbone(x)`, what a transfer head reads) is: the [class] token after the
final norm (the paper's) or the mean of the patch tokens after it (what masked image modelling trains: MAE
fine-tunes and probes on it). Set on a built backbone, and recorded so that a saved one is rebuilt the same."""
from __future__ import annotations

import torch.nn as nn

from ..errors import VitxError

POOLS = {"cls-token": "token", "patch-mean": "avg"}  # frozen-feature names (evaluation.FEATURES) → timm's pooling


def set_pooling(backbone: nn.Module, features: str) -> None:
    """Pool `backbone` as `features` ("cls-token": the [class] token; "patch-mean": the mean patch token; a
    former name is its caller's to translate, evaluation.feature_name), through timm's `global_pool` with the final norm kept where it is (`fc_norm=False`: the same
    weights, a different readout); its record says so, so a saved backbone is rebuilt pooled alike (in vitx and
    in timm)."""
    pool = POOLS[features]
    if getattr(backbone, "global_pool", None) == pool:
        return
    if not hasattr(backbone, "global_pool") or getattr(backbone, "attn_pool", None) is not None or \
            not isinstance(getattr(backbone, "fc_norm", None), nn.Identity):
        other = "patch-mean" if features == "cls-token" else "cls-token"
        raise VitxError(f"this backbone cannot pool as {features} (it is not a timm ViT pooling after its final norm: "
                        f"it has attention pooling or a norm after pooling); pass --features auto or {other}")
    backbone.global_pool = pool
    record = getattr(backbone, "vitx_record", None)
    if record is not None:
        record["overrides"] = {**record["overrides"], "global_pool": pool, "fc_norm": False}
        if record.get("timm_kwargs") is not None:
            record["timm_kwargs"] = {**record["timm_kwargs"], "global_pool": pool, "fc_norm": False}


__all__ = ["POOLS", "set_pooling"]
