"""`timm:<name>`: any timm Vision Transformer by its timm name, without a head."""
from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import VitxError, first_line
from .spec import check_image_size

if TYPE_CHECKING:
    import torch.nn as nn

PREFIX = "timm:"
SOURCES = ("local-dir:", "hf-hub:")  # timm's own prefixes: a folder in timm's hub layout, a hub repo

def create_timm_backbone(arch: str, **overrides: Any) -> "nn.Module":
    """Build timm's `arch` with `num_classes=0`; `pretrained=True` downloads its weights (online users)."""
    import timm  # seconds to import: only when a network is built

    if not arch.startswith(SOURCES) and not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models("*vit*"), n=4, cutoff=0.6)
        hint = f"; did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise VitxError(f"timm has no model '{arch}'{hint}")
    args = {"num_classes": 0, **overrides}
    pretrained = bool(args.pop("pretrained", False))
    why = None
    hub = (pretrained or arch.startswith("hf-hub:")) and not arch.startswith("local-dir:")  # (hf-hub: its config too)
    if hub:
        from ..hub import unreachable

        why = unreachable()  # (offline, or unreachable: then timm's cache only, at once, never a minute of retries)
    try:
        model = timm.create_model(arch, pretrained=pretrained, **args)
    except TypeError as exc:
        raise VitxError(f"timm model '{arch}' does not accept these options ({exc})") from None
    except Exception as exc:  # hub failures come as many types (OSError, HTTPError, LocalEntryNotFoundError)
        if arch.startswith("local-dir:"):
            raise VitxError(f"timm cannot build {arch}: {first_line(exc)}") from None
        if hub:
            from ..hub import not_cached

            said = f"{type(exc).__name__}: {first_line(exc)}"
            said = not_cached(why, said) if why else said
            what = "pretrained weights" if pretrained else "the model's config"
            raise VitxError(f"could not fetch {what} for timm:{arch} ({said}); download them where "
                            "you have internet and pass the folder (timm's save_for_hf or `hf download` layout), or "
                            "start from a vitx run") from None
        raise
    if not hasattr(model, "patch_embed") or not hasattr(model, "blocks"):
        raise VitxError(f"timm:{arch} is not a Vision Transformer (no patch_embed/blocks)")
    if getattr(model.patch_embed, "img_size", None) is not None:  # timm would silently drop a partial patch
        check_image_size(model.patch_embed.img_size, model.patch_embed.patch_size[0])
    return model


def timm_folder(folder: str) -> tuple[str, dict[str, Any]]:
    """(architecture, model_args) of a folder in timm's hub layout (config.json with `architecture`, weights in
    model.safetensors, as timm's `save_for_hf(..., safe_serialization=True)` and `vitx export` write it): enough to
    build the model again without the folder. Pickled weights are refused: vitx never unpickles a file a user
    points at."""
    path = Path(folder).expanduser()
    config = path / "config.json"
    if not config.is_file():
        raise VitxError(f"{folder} is not a timm model folder: it has no config.json")
    try:
        data = json.loads(config.read_text())
    except (ValueError, UnicodeDecodeError):
        raise VitxError(f"{config} is not valid JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("architecture"), str):
        raise VitxError(f"{config} names no timm 'architecture'; not a timm model folder")
    if not (path / "model.safetensors").is_file():
        found = ", ".join(p.name for p in path.iterdir() if p.suffix in (".bin", ".pth", ".pt")) or "none"
        raise VitxError(f"{folder} has no model.safetensors (weights found: {found}); vitx reads safetensors only: "
                        "save with timm's save_for_hf(..., safe_serialization=True)")
    args = data.get("model_args") if isinstance(data.get("model_args"), dict) else {}
    return data["architecture"], {k: v for k, v in args.items() if k != "pretrained"}
