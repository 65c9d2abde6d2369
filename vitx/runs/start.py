"""Where a command's weights start (`--from`; a pre-training's continuation, `continuation.py`, opens it here too):
a vitx run or checkpoint directory, a timm ViT (`timm:<name>`, its pretrained weights: online users;
`timm:hf-hub:REPO`), a folder in timm's hub layout (`--from DIR` or `timm:local-dir:DIR`: what timm's `save_for_hf`
and `vitx export` write), or `scratch` (a randomly initialised `--model`, the paper's "from scratch" baseline).

The start also decides the input (`start_input`): a timm model's `pretrained_cfg` (mean, std, interpolation,
crop), a vitx run's recorded preprocessing. Weights are read from safetensors only; nothing a user points at is
ever unpickled.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..backbones import create_backbone
from ..safe_io import read_config, read_json_object
from .folder import load_backbone, require_ema, saved_layer
from ..errors import VitxError
from ..evaluation.representation import Representation, read_as
from ..settings.groups import SCRATCH
from ..spec import parse_spec


def load_start(start: str, model: str | None = None, seed: int = 0, flag: str = "--from",
               use_ema: bool = False, files: bool = False) -> nn.Module:
    """The backbone a transfer starts from, at its own resolution (interpolation comes later, as an adapter).

    `scratch` is initialised from `seed` alone (the caller's generators are left as they were), so a
    from-scratch baseline is the same network every time it is asked for. `flag`: the option that named the
    start, for the errors. `use_ema`: a vitx run's moving average of its weights (ema.safetensors) in place of
    its live weights. `files`: the caller also reads weights files (pre-training's --from: `continuation.py`), as
    the line refusing a path that is not there says."""
    if use_ema and (start == SCRATCH or start.startswith("timm:")):
        raise VitxError(f"--use-ema reads a vitx run's moving average of its weights; {flag} {start} has none")
    if model and start != SCRATCH:
        raise VitxError(f"--model is for --from scratch; --from {start} brings its own backbone (drop --model)")
    if start == SCRATCH:
        if not model:
            raise VitxError(f"{flag} scratch needs --model (e.g. --model vit-nano/4)")
        name, options = parse_spec(model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            backbone = create_backbone(name, **options)
    elif start.startswith("timm:"):
        name, options = parse_spec(start)
        options.setdefault("pretrained", True)
        if name.startswith("timm:local-dir:"):  # a backbone: the folder's classifier (model_args) is not rebuilt
            options.setdefault("num_classes", 0)
        backbone = create_backbone(name, **options)
        # the weights travel in model.safetensors: rebuilding the saved model must not fetch them again (offline)
        backbone.vitx_record["overrides"].pop("pretrained", None)
    else:
        path = Path(start).expanduser()
        if not path.exists():
            first = " (run `vitx pretrain` first)" if start == "runs/pretrain" else ""
            missing = "no such file or folder" if files else "no such checkpoint directory"
            raise VitxError(f"{flag} {start}: {missing}{first}; give {accepted_starts(files)}")
        if path.is_file():
            raise VitxError(f"{flag} {start} is a file; give {accepted_starts(files)}")
        if is_timm_folder(path):
            if use_ema:
                raise VitxError(f"--use-ema reads a vitx run's moving average of its weights; {flag} {start} is a "
                                "timm model folder (export the run with --use-ema to put its average there)")
            try:
                return load_start(f"timm:local-dir:{path}", None, seed, flag)
            except VitxError as exc:  # said of the folder as the user named it
                said, built = str(exc), f"timm:local-dir:{path}"
                if not said.startswith(built):
                    raise
                raise VitxError(f"{flag} {start}{said[len(built):]}") from None
        if use_ema and (path / "config.json").is_file():
            require_ema(path, f"{flag} {start}")
        backbone = load_backbone(path, use_ema)
    if not all(hasattr(backbone, name) for name in ("pos_embed", "patch_embed", "embed_dim")):
        raise VitxError(f"{flag} {start} is not a Vision Transformer (no patch_embed / pos_embed)")
    return backbone


def accepted_starts(files: bool = False) -> str:
    """Every form a start may take, for the line that refuses one (`files`: pre-training's, which also reads
    weights files)."""
    if files:
        return ("a vitx run or checkpoint folder, a timm model folder (config.json and model.safetensors, as timm's "
                "save_for_hf writes it), a .safetensors file of ViT weights (DINO's checkpoint layout or a bare "
                "backbone), or timm:<name>")
    return ("a vitx run or checkpoint folder, a timm model folder (config.json and model.safetensors, as timm's "
            "save_for_hf writes it), timm:<name>, or scratch")


def is_timm_folder(path: Path) -> bool:
    """A folder in timm's hub layout rather than a vitx run (its config.json names an `architecture`)."""
    config = read_json_object(path / "config.json")
    return config is not None and "architecture" in config and "backbone" not in config


def start_input(start: str, backbone: nn.Module) -> dict[str, Any]:
    """How the start expects its images: {mean, std, interpolation, crop_pct, eval_resize, source}. A timm
    start's `pretrained_cfg` (as timm's `resolve_data_config` reads it; its eval images are resized as timm's
    own transform does), a vitx run's recorded preprocessing, or the paper's 0.5 / 0.5 for scratch."""
    defaults = {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bicubic", "crop_pct": 1.0,
                "eval_resize": "tensor"}
    if start == SCRATCH:
        return {**defaults, "source": "scratch: the paper's 0.5 / 0.5"}
    path = Path(start).expanduser()
    if not start.startswith("timm:") and not is_timm_folder(path):
        recorded = (read_config(path) or {}).get("preprocess") or {}
        found = {k: recorded[k] for k in ("mean", "std", "interpolation") if k in recorded}
        return {**defaults, **{k: list(v) if isinstance(v, (list, tuple)) else v for k, v in found.items()},
                "crop_pct": float(recorded.get("eval_crop_pct", 1.0)), "eval_resize": recorded.get("eval_resize", "tensor"),
                "source": "the run's recorded preprocessing"}
    from timm.data import resolve_data_config

    from ..data.transforms import finite_numbers

    config = resolve_data_config({}, model=backbone)
    interpolation = config.get("interpolation", "bicubic")
    where = f"{start}/config.json: pretrained_cfg"  # (a folder's config.json may have been edited: one line, not a traceback)
    crop_pct = config.get("crop_pct", 1.0)
    if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not 0 < crop_pct <= 1:
        raise VitxError(f"{where}: crop_pct must be a number in (0, 1], got {crop_pct!r}")
    return {"mean": list(finite_numbers(config["mean"], 3, False, f"{where}: mean")),
            "std": list(finite_numbers(config["std"], 3, True, f"{where}: std")),
            "interpolation": interpolation if interpolation in ("bicubic", "bilinear", "nearest") else "bicubic",
            "crop_pct": float(crop_pct), "eval_resize": "timm", "source": "timm's pretrained_cfg"}


def start_features(start: str) -> str:
    """What a start's objective trained as its representation (`Objective.features`): its config.json's
    `features`, else (a run older than the record) its objective's declaration, else pre-logits (scratch, timm
    starts, a transfer's classifier). By its current name (evaluation.FEATURES): a run recorded, or a plugin
    declares, a former one ("backbone")."""
    from ..evaluation import FEATURES, feature_name
    from ..registry import OBJECTIVES

    config = (read_json_object(Path(start).expanduser() / "config.json") or {}) if start != SCRATCH else {}
    recorded = feature_name(config["features"]) if isinstance(config.get("features"), str) else None
    if recorded in FEATURES:
        return recorded
    name = (config.get("objective") or {}).get("name") if isinstance(config.get("objective"), dict) else None
    if not isinstance(name, str) or name not in OBJECTIVES.names():  # (a plugin's objective that is not installed)
        return "pre-logits"
    return feature_name(getattr(OBJECTIVES.get(name).obj, "features", "pre-logits"))


def representation(backbone: nn.Module, start: str, features: str = "auto", use_ema: bool = False) -> Representation:
    """The features of `backbone` (already resized) that evaluation reads, given where it came from (`--from`):
    `auto` reads what the start's objective trained (`start_features`); a vitx run's pre-training head's tanh
    layer for pre-logits when it saved one (the moving average's with `use_ema`)."""
    features = start_features(start) if features == "auto" else features
    own = features == "pre-logits" and not start.startswith("timm:") and start != SCRATCH
    return read_as(backbone, features, saved_layer(Path(start).expanduser(), use_ema) if own else None)


def describe_start(start: str) -> str:
    """A start in one line for a model card: with what its own config.json says of it when it is a vitx run still
    on disk."""
    config = read_json_object(Path(start).expanduser() / "config.json") if start != SCRATCH else None
    if config is None or "run" not in config:
        return f"`{start}`"
    run = config["run"]
    return (f"`{start}`: {run.get('objective', '?')} on `{run.get('data', '?')}`, {config.get('step', '?')} steps "
            f"of batch {run.get('batch_size', '?')}")


def start_data(start: str) -> str:
    """Images to look at a start with: a vitx run's own data when it is embedded (available offline), else the
    embedded shapes."""
    config = read_json_object(Path(start).expanduser() / "config.json") if start != SCRATCH else None
    data = ((config or {}).get("run") or {}).get("data", "")
    return data if isinstance(data, str) and data.startswith("embedded:") else "embedded:shapes"
