"""A finished run as a folder in the Hugging Face hub layout that timm loads as it is:
`timm.create_model("local-dir:DIR", pretrained=True)`, or `hf-hub:owner/name` once uploaded.

    DIR/config.json        architecture, model_args, num_classes, label_names, pretrained_cfg (input size,
                           mean, std, interpolation, crop), as timm's `load_model_config_from_path` reads it
    DIR/model.safetensors  the backbone, and a transfer's classifier as `head.weight` / `head.bias`
    DIR/README.md          the model card (card.py)
    DIR/curves.png         the run's training curves, when it drew them

A classifier is exported when it is one linear layer on the [class] token, which is timm's own head: a
transfer's. A pre-training's heads (the supervised tanh MLP, MPP's patch predictor, ...) have no timm
equivalent, so a pre-training is exported as the backbone alone (`num_classes` 0: pooled features).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..checkpoint import atomic_write_text, read_json_object, read_weights, save_weights
from ..errors import VitxError
from ..trained import TrainedRun, classifier_heads, resolve_run
from .card import model_card

FIGURES = ("curves.png",)  # the run's training curves, shown in the card when the run drew them
TIMM_HEAD = ("head.bias", "head.weight")
INIT_ONLY = ("weight_init", "pretrained")  # how weights start or are fetched, not the architecture


def linear_head(run: TrainedRun) -> dict[str, torch.Tensor] | None:
    """The run's classifier under timm's key names when it is a single linear layer (a transfer's), else None."""
    if run.objective != "supervised" or not (run.path / "heads.safetensors").is_file():
        return None
    heads = classifier_heads(run)
    return heads if tuple(sorted(heads)) == TIMM_HEAD else None


def timm_arch(run: TrainedRun, num_classes: int) -> tuple[str, dict[str, Any]]:
    """timm's architecture name and the arguments that rebuild the run's backbone with `num_classes` outputs."""
    record = run.config["backbone"]
    arch = record.get("timm_arch")
    if not arch or record.get("timm_kwargs") is None:
        raise VitxError(f"{run.path}: backbone {record.get('name')} was built by a user factory, not from a timm "
                        "architecture; timm could not rebuild it from an export")
    args = {k: v for k, v in record["timm_kwargs"].items() if k not in INIT_ONLY}
    args["num_classes"] = num_classes
    return arch, args


def build_checked(arch: str, args: dict[str, Any], state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """timm's model with `state` loaded strictly: an export that timm could not load is never written."""
    import timm

    model = timm.create_model(arch, pretrained=False, **args)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor of another shape
        raise VitxError(f"the weights do not fit timm's {arch} ({str(exc).splitlines()[-1].strip()}); "
                        "cannot export") from None
    if missing or unexpected:
        raise VitxError(f"the weights do not match timm's {arch} (missing {missing[:2]}, unexpected "
                        f"{unexpected[:2]}); cannot export")
    return model


def pretrained_cfg(run: TrainedRun, model: torch.nn.Module, num_classes: int) -> dict[str, Any]:
    """timm's preprocessing record for the run's evaluation transform: a VTAB transfer resizes the whole image
    (crop_mode "squash"), a pre-training centre-crops `eval_crop_pct` of the short side."""
    pre = run.preprocess()
    default = dict(getattr(model, "pretrained_cfg", {}) or {})
    return {
        "input_size": [3, *(int(s) for s in model.patch_embed.img_size)],
        "fixed_input_size": bool(default.get("fixed_input_size", True)),
        "interpolation": pre.interpolation,
        "crop_pct": float(pre.eval_crop_pct),
        "crop_mode": "squash" if pre.squash else "center",
        "mean": list(pre.mean),
        "std": list(pre.std),
        "num_classes": num_classes,
        "first_conv": default.get("first_conv", "patch_embed.proj"),
        "classifier": default.get("classifier", "head"),
        "description": f"A Vision Transformer exported by vitx {__version__}",
    }


def hub_config(run: TrainedRun, arch: str, args: dict[str, Any], model: torch.nn.Module,
               labels: list[str] | None) -> dict[str, Any]:
    """config.json in the layout timm writes (`save_config_for_hf`) and reads (`_parse_model_cfg`)."""
    num_classes = int(args["num_classes"])
    config: dict[str, Any] = {
        "architecture": arch,
        "num_classes": num_classes,
        "num_features": int(model.num_features),
        "global_pool": getattr(model, "global_pool", "token"),
        "model_args": args,
    }
    if labels:
        config["label_names"] = labels
    config["pretrained_cfg"] = pretrained_cfg(run, model, num_classes)
    transfer = run.config.get("transfer", {})
    config["vitx"] = {"version": __version__, "source": str(run.path), "step": run.config.get("step"),
                      "backbone": run.config["backbone"].get("name"), "objective": run.objective,
                      **({"task": transfer.get("task")} if transfer else {})}
    return config


def _check_target(to: Path) -> None:
    """`to` must be new, empty, or an earlier export (whose files are replaced); never someone else's folder."""
    if not to.exists():
        return
    if not to.is_dir():
        raise VitxError(f"--to {to} is a file; give a folder to write")
    try:
        if not any(to.iterdir()):
            return
    except OSError as exc:
        raise VitxError(f"--to {to}: cannot read it ({exc.strerror or exc})") from None
    if (read_json_object(to / "config.json") or {}).get("vitx") is None:
        raise VitxError(f"--to {to} holds other files; give a new or empty folder (an earlier vitx export there "
                        "is replaced)")


@dataclass(frozen=True)
class Exported:
    """What `export_run` wrote: the folder, the run it came from, and its classifier's classes (0: none)."""

    folder: Path
    run: TrainedRun
    num_classes: int


def export_run(run: str | Path, to: str | Path, repo_id: str | None = None) -> Exported:
    """Write RUN's export to `to` (the model card names `repo_id` when it will be pushed there)."""
    found = resolve_run(run)
    to = Path(to).expanduser()
    _check_target(to)
    head = linear_head(found)
    num_classes = int(found.num_classes or 0) if head is not None else 0
    arch, args = timm_arch(found, num_classes)
    state = read_weights(found.path / "model.safetensors")
    state.update(head or {})
    model = build_checked(arch, args, state)
    labels = found.class_names()[0] if num_classes else None
    config = hub_config(found, arch, args, model, labels)
    card = model_card(found, config, to, repo_id)
    # the whole folder is written beside `to` and moved into place: a failure leaves `to` as it was, never an
    # earlier export's card beside new weights
    staged = to.with_name(f".{to.name}.tmp-{os.getpid()}")
    try:
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        save_weights(state, staged / "model.safetensors", {"vitx_version": __version__})
        atomic_write_text(staged / "config.json", json.dumps(config, indent=2) + "\n")
        atomic_write_text(staged / "README.md", card)
        for name in FIGURES:
            if (found.path / name).is_file():
                shutil.copyfile(found.path / name, staged / name)
        if to.exists():
            shutil.rmtree(to)  # empty, or an earlier vitx export (_check_target)
        os.replace(staged, to)
    except OSError as exc:
        shutil.rmtree(staged, ignore_errors=True)
        raise VitxError(f"--to {to}: cannot write the export ({exc.strerror or exc})") from None
    return Exported(to, found, num_classes)


__all__ = ["FIGURES", "Exported", "build_checked", "export_run", "hub_config", "linear_head",
           "pretrained_cfg", "timm_arch"]
