"""Weights released outside vitx and timm, read from one local safetensors file (`vitx pretrain --from FILE`):
DINO's full training checkpoint (`student.module.backbone.*`, `student.module.head.*`, `teacher.backbone.*`,
`teacher.head.*`, `dino_loss.center`: main_dino.py's `save_dict`, flattened) and a bare ViT state dict in DINO's
and timm's names (`dino_vits16_pretrain.pth`: `cls_token`, `pos_embed`, `patch_embed.proj.*`, `blocks.N.*`,
`norm.*`).

The ViT is rebuilt from the shapes (width, depth, patch, grid, MLP ratio; the attention heads at DINO's and timm's
64 channels each). Nothing is unpickled: a .pth is refused with the one line a user can run to convert it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..errors import VitxError, first_line

PICKLED = (".pth", ".pt", ".bin", ".ckpt", ".pkl", ".pickle", ".tar")
DINO_MEAN, DINO_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # DINO's Normalize (main_dino.py)
HEAD_WIDTH = 64  # channels per attention head in DINO's and timm's ViT-Ti/S/B/L (ViT-H and g: 80 and 88)
HEADS_BY_WIDTH = {1280: 16, 1408: 16}
SIZES = {192: "tiny", 384: "small", 768: "base", 1024: "large", 1280: "huge"}
BACKBONE_KEY = "patch_embed.proj.weight"  # a ViT's state dict holds it under its backbone's prefix
# DINO's full checkpoint: the student is DDP-wrapped (`module.`), the teacher usually not; one name for each here
DINO_PARTS = {"student": "student.", "teacher": "teacher."}


def convert_line(path: Path) -> str:
    """The one command that turns a pickled checkpoint the user trusts into safetensors (run by the user: vitx
    never unpickles). Nested dicts (DINO's `student`, `teacher`, `dino_loss`) are flattened to `name.key`."""
    out = path.with_suffix(".safetensors")
    return ("python -c \"import argparse, torch, safetensors.torch as st; "
            "torch.serialization.add_safe_globals([argparse.Namespace]); "
            f"c = torch.load('{path}', map_location='cpu', weights_only=True); "
            "f = {f'{k}.{n}': t for k, v in c.items() if isinstance(v, dict) for n, t in v.items() "
            "if torch.is_tensor(t)} or c; "
            f"st.save_file({{k: t.contiguous() for k, t in f.items()}}, '{out}')\"")


def refuse_pickle(path: Path, flag: str = "--from") -> None:
    """One line for a pickled checkpoint: vitx does not unpickle it; the command that converts it."""
    raise VitxError(f"{flag} {path}: vitx does not unpickle checkpoints (a .pth can run code when loaded); convert "
                    f"it yourself if you trust it: {convert_line(path)}")


@dataclass
class Released:
    """A released checkpoint, read: the backbone's state (timm's names), the rest in neutral names for the
    objective that knows the layout (`Objective.released_state`), what it is, and the input it expects."""

    path: Path
    layout: str  # "dino" (DINO's full checkpoint) or "vit" (a bare backbone)
    backbone: dict[str, torch.Tensor]
    rest: dict[str, torch.Tensor] = field(default_factory=dict)  # dino: student.head.*, teacher.*, dino_loss.*

    @property
    def described(self) -> str:
        return "DINO checkpoint (student)" if self.layout == "dino" else "ViT weights"


def read_released(path: Path) -> Released:
    """A local .safetensors file of ViT weights, in DINO's full-checkpoint or bare-backbone layout."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise VitxError(f"--from {path} is not a readable safetensors file ({first_line(exc)})") from None
    state = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    roots = sorted({k[: -len(BACKBONE_KEY)] for k in state if k.endswith(BACKBONE_KEY)})
    if not roots:
        raise VitxError(f"--from {path} holds no Vision Transformer weights (no {BACKBONE_KEY}, under any prefix); "
                        "give a ViT's state dict, DINO's checkpoint flattened, or a vitx run or timm model folder")
    student = [r for r in roots if r.startswith(DINO_PARTS["student"])]
    if student and any(r.startswith(DINO_PARTS["teacher"]) for r in roots):
        return _dino(path, state, student[0])
    if len(roots) > 1:
        raise VitxError(f"--from {path} holds {len(roots)} ViTs ({', '.join(repr(r) for r in roots)}) and not "
                        "DINO's student/teacher layout; save the one to start from alone")
    root = roots[0]
    backbone = {k[len(root):]: v for k, v in state.items() if k.startswith(root)}
    return Released(path, "vit", backbone)


def _dino(path: Path, state: dict[str, torch.Tensor], root: str) -> Released:
    """DINO's layout in one naming: `student.backbone.*` is the backbone; `student.head.*`, `teacher.backbone.*`,
    `teacher.head.*` and `dino_loss.*` (DDP's `module.` dropped) are offered to the objective."""
    backbone = {k[len(root):]: v for k, v in state.items() if k.startswith(root)}
    rest = {}
    for key, value in state.items():
        if key.startswith(root):
            continue
        name = re.sub(r"^(student|teacher)\.module\.", r"\1.", key)
        rest[name] = value
    return Released(path, "dino", backbone, rest)


def vit_args(state: dict[str, torch.Tensor], path: Path) -> tuple[str, dict[str, Any], str]:
    """(timm name, create_backbone overrides, one clause saying what was read) of the ViT a bare state dict in
    timm's names holds. Refused in one line where the shapes are not a plain ViT's."""
    try:
        proj = state[BACKBONE_KEY]  # (D, C, p, p)
        width, channels, patch = int(proj.shape[0]), int(proj.shape[1]), int(proj.shape[-1])
        depth = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k)))
        hidden = int(state["blocks.0.mlp.fc1.weight"].shape[0])
        positions = int(state["pos_embed"].shape[1])  # prefix + grid²
    except (KeyError, ValueError, IndexError):
        raise VitxError(f"--from {path} is not a plain ViT's state dict (expected pos_embed, patch_embed.proj, "
                        "blocks.N.mlp.fc1, ... in timm's and DINO's names)") from None
    prefix = int("cls_token" in state) + (int(state["reg_token"].shape[1]) if "reg_token" in state else 0)
    side = math.isqrt(max(positions - prefix, 0))
    if side < 1 or side * side != positions - prefix:
        raise VitxError(f"--from {path}: pos_embed has {positions} positions, not {prefix} prefix token(s) and a "
                        "square grid of patches")
    heads = HEADS_BY_WIDTH.get(width, width // HEAD_WIDTH)
    if heads < 1 or width % heads:
        raise VitxError(f"--from {path}: a {width}-wide ViT has no whole number of {HEAD_WIDTH}-channel attention "
                        "heads; vitx cannot tell how many it had")
    size = SIZES.get(width, "base")
    name = f"vit_{size}_patch{patch}_224"
    import timm

    if not timm.is_model(name):
        name = "vit_base_patch16_224"
    overrides = {"img_size": side * patch, "patch_size": patch, "embed_dim": width, "depth": depth, "num_heads": heads,
                 "mlp_ratio": hidden / width, "in_chans": channels, "qkv_bias": "blocks.0.attn.qkv.bias" in state,
                 "class_token": "cls_token" in state}
    if "reg_token" in state:
        overrides["reg_tokens"] = int(state["reg_token"].shape[1])
    if "blocks.0.ls1.gamma" in state:
        overrides["init_values"] = 1.0  # layer scale (its values are loaded)
    said = (f"a ViT {width} wide, {depth} block{'s' * (depth != 1)}, patch {patch} at {side * patch}px, {heads} "
            f"attention head{'s' * (heads != 1)} of {width // heads} channels")
    return f"timm:{name}", overrides, said


def build_vit(released: Released) -> tuple[nn.Module, str]:
    """The backbone of a released checkpoint, its weights loaded strictly (a classifier head beside them is
    dropped and said): (backbone, what was read)."""
    from ..backbones import create_backbone

    state = released.backbone
    classifier = {k: v for k, v in state.items() if k.startswith("head.")}
    state = {k: v for k, v in state.items() if k not in classifier}
    name, overrides, said = vit_args(state, released.path)
    try:
        backbone = create_backbone(name, **overrides)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise VitxError(f"--from {released.path}: timm cannot build {said} ({first_line(exc)})") from None
    # weights beside the ViT's own modules (an MAE checkpoint's decoder, say) are dropped, and said; one under a
    # module of the ViT that the rebuilt one lacks (a q/k norm, say) means another architecture: refused below
    own = {k.split(".")[0] for k in backbone.state_dict()}
    other = {k: v for k, v in state.items() if k.split(".")[0] not in own}
    state = {k: v for k, v in state.items() if k not in other}
    released.rest.update({f"other.{k}": v for k, v in other.items()})
    try:
        missing, unexpected = backbone.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor of another shape than the rebuilt ViT's
        found = re.search(r"size mismatch for ([^:]+)", str(exc))
        raise VitxError(f"--from {released.path} does not fit {said} (another shape for "
                        f"{found.group(1) if found else 'some weights'})") from None
    if missing or unexpected:
        shown = ", ".join((missing + unexpected)[:3])
        raise VitxError(f"--from {released.path} does not fit {said} (missing {len(missing)}, unexpected "
                        f"{len(unexpected)} weights: {shown})")
    if classifier:
        released.rest.update({f"classifier.{k[len('head.'):]}": v for k, v in classifier.items()})
    return backbone, said


__all__ = ["DINO_MEAN", "DINO_STD", "PICKLED", "Released", "build_vit", "convert_line", "read_released",
           "refuse_pickle"]
