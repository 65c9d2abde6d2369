"""A backbone described as data: which timm architecture it is and the arguments that make it."""
from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import VitxError

if TYPE_CHECKING:
    import torch.nn as nn


@dataclass(frozen=True)
class BackboneSpec:
    """The paper's table row for one ViT, realised as a timm `VisionTransformer`.

    `timm_arch` names the timm registration it is built from; `kwargs` override that registration's
    arguments, so `timm.create_model(timm_arch, **kwargs)` builds the same network (config.json records both).
    """

    timm_arch: str
    depth: int
    width: int
    mlp: int
    heads: int
    patch: int
    img_size: int = 224
    stride: int | None = None  # pixels per token when it differs from `patch` (hybrids)
    resnet_layers: tuple[int, ...] = ()  # a hybrid's ResNet stages (blocks per stage), before the ViT
    kwargs: dict[str, Any] = field(default_factory=dict)

    def timm_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """Arguments for `timm.create_model(self.timm_arch, **...)`; the backbone has no head by default."""
        # weight_init: the paper's initialisation (lecun-normal patches, zero head), via timm
        args: dict[str, Any] = dict(img_size=self.img_size, embed_dim=self.width, depth=self.depth, num_heads=self.heads,
                                    mlp_ratio=self.mlp / self.width, num_classes=0, weight_init="jax")
        if self.stride is None:
            args["patch_size"] = self.patch
        return {**args, **self.kwargs, **overrides}

    def build(self, **overrides: Any) -> "nn.Module":
        import timm  # seconds to import: only when a network is built

        unknown = _unknown_args(overrides)
        if unknown:
            raise VitxError(f"--model: unknown option '{unknown[0]}' for timm's {self.timm_arch} (options such as "
                            "depth, embed_dim, num_heads, mlp_ratio, patch_size, img_size, drop_path_rate)")
        args = self.timm_kwargs(**overrides)
        _check_args(args, {}, "--model")  # the same bounds as a saved run's: one line, not a traceback in timm
        check_image_size(args["img_size"], args.get("patch_size", self.stride or self.patch))
        return timm.create_model(self.timm_arch, pretrained=False, **args)

    def num_parameters(self, img_size: int | None = None) -> int:
        """The parameter count, from the table row alone (no torch): `vitx models` lists it without building
        anything. Tested equal to the built network's count for every registered spec."""
        side = img_size or self.img_size
        d, m, tokens = self.width, self.mlp, (side // (self.stride or self.patch)) ** 2
        if self.resnet_layers:  # ResNetV2 stem and bottleneck stages (GroupNorm), then a 1x1 projection
            params, width = 3 * 64 * 7 * 7 + 2 * 64, 64  # the stem
            for i, blocks in enumerate(self.resnet_layers):
                out, mid = 256 * 2 ** i, 64 * 2 ** i  # a bottleneck's output and inner widths
                params += width * out + 2 * out  # downsampling shortcut, first block
                for b in range(blocks):
                    params += (width if b == 0 else out) * mid + 9 * mid * mid + mid * out + 2 * (2 * mid + out)
                width = out
            params += width * d + d  # HybridEmbed's 1x1 projection
        else:
            params = 3 * self.patch ** 2 * d + d  # patch embedding: a p×p conv with bias
        params += d + (tokens + 1) * d  # [class] token, position embeddings
        params += self.depth * (4 * d * d + 2 * d * m + 9 * d + m)  # blocks: LN, qkv, proj, LN, MLP
        return params + 2 * d  # final LayerNorm


def check_image_size(img_size: int | tuple[int, int], patch: int) -> None:
    """Every side must be a whole number of patches: the paper's ViT has no padding."""
    sides = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    for side in sides:
        if side <= 0 or side % patch:
            raise VitxError(f"image size {side} is not divisible by the patch size {patch}; "
                            f"use a multiple of {patch} (e.g. {max(patch, round(side / patch) * patch)})")


# Bounds on the architecture numbers a config.json may hold, far above any ViT (ViT-22B: depth 48, width 6144,
# 48 heads): a record outside them was edited or damaged, and building it could take hours or all the memory.
MAX_IMAGE_SIDE = 4096
ARG_LIMITS = {"depth": (1, 256), "embed_dim": (1, 16384), "num_heads": (1, 1024), "patch_size": (1, 1024),
              "num_classes": (0, 1_000_000)}
MAX_MLP_RATIO = 64.0
NOT_BUILD_ARGS = {"pretrained", "grad_checkpointing"}  # taken by timm.create_model / create_backbone themselves


def _shown(value: Any) -> str:
    return json.dumps(value)[:60]


def _int_in(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise VitxError(f"{what} must be an integer from {lo} to {hi}, got {_shown(value)}")
    return value


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in a safetensors file, read from its header alone (no tensor is loaded)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise VitxError(f"{path} is not a readable safetensors file ({exc})") from None


def _unknown_args(args: dict[str, Any]) -> list[str]:
    """The names in `args` (sorted) that timm's VisionTransformer, which a registered spec builds, does not take."""
    from timm.models.vision_transformer import VisionTransformer

    params = inspect.signature(VisionTransformer.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return sorted(set(args) - (set(params) - {"self"}) - NOT_BUILD_ARGS)


def _check_args(args: dict[str, Any], shapes: dict[str, tuple[int, ...]], where: str,
                stride: int | None = None) -> None:
    """Bounds on each architecture number, then agreement with the weights' shapes."""
    for key, (lo, hi) in ARG_LIMITS.items():
        if key in args:
            _int_in(args[key], lo, hi, f"{where}: {key}")
    sides: tuple[int, ...] = ()
    if "img_size" in args:
        size = args["img_size"]
        size = [size, size] if isinstance(size, int) and not isinstance(size, bool) else size
        if not isinstance(size, (list, tuple)) or len(size) != 2:
            raise VitxError(f"{where}: img_size must be an integer (or two) from 1 to {MAX_IMAGE_SIDE}, "
                            f"got {_shown(args['img_size'])}")
        sides = tuple(_int_in(s, 1, MAX_IMAGE_SIDE, f"{where}: img_size") for s in size)
    ratio = args.get("mlp_ratio")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                              or not math.isfinite(ratio) or not 0 < ratio <= MAX_MLP_RATIO):
        raise VitxError(f"{where}: mlp_ratio must be a number above 0 and at most {MAX_MLP_RATIO:g}, "
                        f"got {_shown(ratio)}")

    def disagree(what: str, held: Any) -> VitxError:
        return VitxError(f"{where}: {what}, but model.safetensors holds {held}; this config.json does not "
                         "describe these weights (was it edited?)")

    blocks = {k.split(".")[1] for k in shapes if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    if "depth" in args and blocks and args["depth"] != len(blocks):
        raise disagree(f"depth is {args['depth']}", f"{len(blocks)} blocks")
    width = (shapes.get("cls_token") or shapes.get("pos_embed") or (None,))[-1]
    if "embed_dim" in args and width and args["embed_dim"] != width:
        raise disagree(f"embed_dim is {args['embed_dim']}", f"width {width}")
    dim = args.get("embed_dim", width)
    if "num_heads" in args and dim and dim % args["num_heads"]:
        raise VitxError(f"{where}: num_heads {args['num_heads']} does not divide the width {dim}")
    fc1 = shapes.get("blocks.0.mlp.fc1.weight")
    if ratio is not None and fc1 and width and int(width * ratio) != fc1[0]:
        raise disagree(f"mlp_ratio is {ratio:g}", f"an MLP of {fc1[0]} for width {width}")
    proj = shapes.get("patch_embed.proj.weight") or ()
    conv = len(proj) == 4 and not any(k.startswith("patch_embed.backbone.") for k in shapes)  # not a hybrid
    if "patch_size" in args and conv and args["patch_size"] != proj[-1]:
        raise disagree(f"patch_size is {args['patch_size']}", f"{proj[-1]}x{proj[-1]} patches")
    patch = proj[-1] if conv else stride
    pos = shapes.get("pos_embed")
    if sides and patch:
        try:
            check_image_size(sides, patch)
        except VitxError as exc:
            raise VitxError(f"{where}: {exc}") from None
        grid = (sides[0] // patch) * (sides[1] // patch)
        prefix = ("cls_token" in shapes) + (shapes.get("reg_token") or (0, 0))[1]
        if pos and len(pos) == 3 and grid not in (pos[1], pos[1] - prefix):
            raise disagree(f"img_size {sides[0]}x{sides[1]} makes {grid} patches",
                           f"position embeddings for {pos[1] - prefix}")


def check_saved_backbone(record: Any, weights: Path, where: str) -> None:
    """A config.json's backbone record, checked before anything is built from it: the architecture's numbers in
    sane ranges and in agreement with the shapes in `weights` (read from the safetensors header alone), and a
    registered spec's overrides only arguments its timm class takes. An edited or damaged record is one line,
    never a million blocks built, all the memory taken, or a traceback deep inside timm."""
    from ..registry import BACKBONES

    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        raise VitxError(f"{where}: backbone must be an object with the backbone's name")
    shapes = weight_shapes(weights)
    for key in ("overrides", "timm_kwargs"):
        if record.get(key) is None and key == "timm_kwargs":  # a user factory's backbone has none
            continue
        if not isinstance(record.get(key), dict):
            raise VitxError(f"{where}: backbone.{key} must be an object of arguments, got {_shown(record.get(key))}")
        _check_args(record[key], shapes, f"{where} backbone.{key}")
    name = record["name"]
    spec = BACKBONES.get(name).obj if name in BACKBONES else None
    if not isinstance(spec, BackboneSpec):
        return
    for key in ("overrides", "timm_kwargs"):
        unknown = _unknown_args(record.get(key) or {})
        if unknown:
            raise VitxError(f"{where} backbone.{key}: unknown argument '{unknown[0]}' for {name} "
                            f"(timm {spec.timm_arch})")
    built = spec.timm_kwargs(**{k: v for k, v in record["overrides"].items() if k not in NOT_BUILD_ARGS})
    _check_args(built, shapes, f"{where} backbone.overrides", spec.stride)
