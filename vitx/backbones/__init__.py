"""Backbones: the paper's ViTs, the R50 hybrid, any timm ViT (`timm:<name>`), and user registrations.

Contract (timm's VisionTransformer): `forward_features(x) -> (B, N + prefix, D)` tokens,
`forward_head(tokens, pre_logits=True) -> (B, D)`, attributes `patch_embed`, `pos_embed`, `cls_token`,
`num_prefix_tokens`, `embed_dim`, and `set_grad_checkpointing()`. Objectives that act between its stages (between
the patch and position embeddings, or at another grid) run `stages.forward_tokens`, never timm's private methods."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import VitxError, first_line
from ..registry import BACKBONES
from . import vit, hybrid  # noqa: F401,I001  (registers the built-in names, paper ViTs first)
from .spec import BackboneSpec, check_image_size
from .timm_any import PREFIX as TIMM_PREFIX
from .timm_any import create_timm_backbone, timm_folder

if TYPE_CHECKING:
    import torch.nn as nn

__all__ = ["BackboneSpec", "create_backbone", "backbone_record", "count_parameters", "check_image_size"]


def create_backbone(name: str, **overrides: Any) -> "nn.Module":
    """Build a registered backbone (or `timm:<arch>`) with `overrides` such as `img_size`, `patch_size`. The
    result carries `vitx_record`: what config.json needs to build it again, in vitx and in timm."""
    grad_ckpt = bool(overrides.pop("grad_checkpointing", False))
    if name.startswith(TIMM_PREFIX):
        arch = name[len(TIMM_PREFIX):]
        folder = timm_folder(arch[len("local-dir:"):]) if arch.startswith("local-dir:") else None  # checked first
        model = create_timm_backbone(arch, **overrides)
        if folder is not None:  # recorded as the architecture itself: rebuilt without the folder
            arch, folder_args = folder
            name, overrides = TIMM_PREFIX + arch, {**folder_args, **overrides}
        timm_args = {k: v for k, v in overrides.items() if k != "pretrained"}
        timm_args.setdefault("num_classes", 0)
    else:
        entry = BACKBONES.get(name)
        if isinstance(entry.obj, BackboneSpec):
            model = entry.obj.build(**overrides)
            arch, timm_args = entry.obj.timm_arch, entry.obj.timm_kwargs(**overrides)
        else:  # a user factory
            model, arch, timm_args = _from_factory(name, entry, overrides), None, None
    if grad_ckpt:
        model.set_grad_checkpointing(True)
    # the weights travel in model.safetensors: rebuilding a saved model must never fetch them again (offline)
    kept = {k: v for k, v in overrides.items() if k != "pretrained"}
    model.vitx_record = {"name": name, "overrides": kept, "timm_arch": arch, "timm_kwargs": timm_args}
    return model


def _from_factory(name: str, entry: Any, overrides: dict[str, Any]) -> "nn.Module":
    """A plugin's backbone factory called; its failure, or something other than a module, is one line naming
    the plugin (vitx's errors from inside it pass as they are)."""
    import torch.nn as nn

    try:
        model = entry.obj(**overrides)
    except VitxError:
        raise
    except Exception as exc:  # the plugin's own failure: the user's to fix there, not a vitx traceback
        raise VitxError(f"backbone '{name}' ({entry.source}) failed to build: {type(exc).__name__}: "
                        f"{first_line(exc)}") from exc
    if not isinstance(model, nn.Module):
        raise VitxError(f"backbone '{name}' ({entry.source}): its factory returned {type(model).__name__}, not a "
                        "torch module")
    return model


def backbone_record(model: "nn.Module") -> dict[str, Any]:
    """How to rebuild `model`: its registry name and overrides, and its timm architecture and arguments."""
    return dict(model.vitx_record)


def count_parameters(name: str, **overrides: Any) -> int:
    """Parameter count without allocating weights (built on the meta device)."""
    import torch

    if not name.startswith(TIMM_PREFIX):
        overrides.setdefault("weight_init", "skip")  # nothing to initialise on the meta device
    with torch.device("meta"):
        model = create_backbone(name, **overrides)
    return sum(p.numel() for p in model.parameters())
