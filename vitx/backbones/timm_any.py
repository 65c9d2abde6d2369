"""`timm:<name>`: any timm Vision Transformer by its timm name, without a head."""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from ..errors import VitxError
from .spec import check_image_size

if TYPE_CHECKING:
    import torch.nn as nn

PREFIX = "timm:"


def create_timm_backbone(arch: str, **overrides: Any) -> "nn.Module":
    """Build timm's `arch` with `num_classes=0`; `pretrained=True` downloads its weights (online users)."""
    import timm  # seconds to import: only when a network is built

    if not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models("*vit*"), n=4, cutoff=0.6)
        hint = f"; did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise VitxError(f"timm has no model '{arch}'{hint}")
    args = dict(num_classes=0)
    args.update(overrides)
    pretrained = bool(args.pop("pretrained", False))
    try:
        model = timm.create_model(arch, pretrained=pretrained, **args)
    except TypeError as exc:
        raise VitxError(f"timm model '{arch}' does not accept these options ({exc})") from None
    except Exception as exc:  # hub failures come as many types (OSError, HTTPError, LocalEntryNotFoundError)
        if pretrained:
            raise VitxError(f"could not fetch pretrained weights for timm:{arch} ({type(exc).__name__}); "
                            "are you offline? Use a local vitx checkpoint instead") from None
        raise
    if not hasattr(model, "patch_embed") or not hasattr(model, "blocks"):
        raise VitxError(f"timm:{arch} is not a Vision Transformer (no patch_embed/blocks)")
    if getattr(model.patch_embed, "img_size", None) is not None:  # timm would silently drop a partial patch
        check_image_size(model.patch_embed.img_size, model.patch_embed.patch_size[0])
    return model
