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
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from .. import __version__
from ..safe_io import atomic_write_text, fsync_path, read_weights, save_weights
from ..errors import VitxError, write_reason
from ..runs.ownership import held, holds, is_vitx_folder, shown
from ..runs.rundir import MARKER
from ..runs.trained import TrainedRun, classifier_heads, resolve_run
from .card import model_card

FIGURES = ("curves.png",)  # the run's training curves, shown in the card when the run drew them
EXPORT_FILES = ("config.json", "model.safetensors", "README.md", *FIGURES)  # all an export writes; nothing else
TIMM_HEAD = ("head.bias", "head.weight")
INIT_ONLY = ("weight_init", "pretrained")  # how weights start or are fetched, not the architecture


def linear_head(run: TrainedRun) -> dict[str, torch.Tensor] | None:
    """The run's classifier under timm's key names when it is a single linear layer (a transfer's), else None."""
    if run.objective != "supervised" or not run.heads.is_file():
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

    try:
        model = timm.create_model(arch, pretrained=False, **args)
    except TypeError as exc:  # an argument the architecture does not take: an edited config.json
        bad = re.search(r"argument '(\w+)'", str(exc))
        what = f"the argument '{bad.group(1)}'" if bad else "the arguments"
        raise VitxError(f"timm's {arch} does not take {what} that config.json records (backbone.timm_kwargs); "
                        "cannot export") from None
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


def _check_target(to: Path, runs: list[Path], force: bool) -> None:
    """`to` must be new or empty, or with `force` a folder where only the export's own files are replaced. Never
    the run itself, a folder inside it or one that holds it: the export would write over the run's own
    config.json and weights (and an earlier version deleted the whole folder)."""
    where = to.resolve()
    for run in {r.resolve() for r in runs}:
        if where == run or run in where.parents:
            raise VitxError(f"--to {to} is {'the run' if where == run else 'inside the run'} being exported "
                            f"({run}); give a folder outside it")
        if where in run.parents:
            raise VitxError(f"--to {to} holds the run being exported ({run}); give a folder outside it")
    if not to.exists():
        return
    if not to.is_dir():
        raise VitxError(f"--to {to} is a file; give a folder to write")
    names = held(to, "--to")
    if is_vitx_folder(to) or (to / MARKER).is_file():  # a run, a transfer, or a checkpoint (its marker)
        raise VitxError(f"--to {to} holds {holds(to) or 'a vitx run'}, whose own config.json and weights the export "
                        "would replace (--force or not); give a folder of the export's own")
    if force:
        return
    keep = f"or --force to replace only the export's own files ({', '.join(EXPORT_FILES)}) and keep everything else"
    if where == Path.cwd().resolve():
        raise VitxError(f"--to {to} is the current directory; give a new folder, {keep}")
    if names:
        raise VitxError(f"--to {to} is not empty (it holds {shown(names)}); give a new or empty folder, {keep}")


def _move_into(staged: Path, to: Path, names: list[str]) -> None:
    """The staged export into `to`: the whole folder at once when `to` is new, else file by file (each an atomic
    rename), so nothing else in `to` is touched."""
    if not to.exists():
        os.replace(staged, to)
        fsync_path(to.parent)
        return
    for name in names:
        os.replace(staged / name, to / name)
    fsync_path(to)
    staged.rmdir()


@dataclass(frozen=True)
class Exported:
    """What `export_run` wrote: the folder, the files it wrote there, the run it came from, and its classifier's
    classes (0: none)."""

    folder: Path
    run: TrainedRun
    num_classes: int
    files: tuple[str, ...] = ()


def export_run(run: str | Path, to: str | Path, repo_id: str | None = None, force: bool = False,
               ema: bool = False, teacher: bool = False) -> Exported:
    """Write RUN's export to `to` (the model card names `repo_id` when it will be pushed there). `to` is new or
    empty; with `force` it may hold other files, which are kept (only the export's own are replaced). `ema`:
    the run's moving average of its weights instead of its live weights; `teacher`: its objective's teacher."""
    found = resolve_run(run, ema, teacher)
    to = Path(to).expanduser()
    _check_target(to, [Path(run).expanduser(), found.path, *([found.task_dir] if found.task_dir else [])], force)
    head = None if teacher else linear_head(found)
    num_classes = int(found.num_classes or 0) if head is not None else 0
    arch, args = timm_arch(found, num_classes)
    state = read_weights(found.weights)
    if any(k.endswith(".vpt_prompt") for k in state):
        raise VitxError(f"{found.path} was transferred with VPT: its prompt tokens have no place in timm's ViT, so "
                        "timm could not load an export; use it with vitx (--from, vitx predict)")
    state.update(head or {})
    model = build_checked(arch, args, state)
    labels = found.class_names()[0] if num_classes else None
    config = hub_config(found, arch, args, model, labels)
    card = model_card(found, config, to, repo_id)
    # everything is written to a new folder beside `to` first: a failure leaves `to` as it was
    staged = None
    try:
        to.resolve().parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{to.resolve().name}.tmp-", dir=to.resolve().parent))
        save_weights(state, staged / "model.safetensors", {"vitx_version": __version__})
        atomic_write_text(staged / "config.json", json.dumps(config, indent=2) + "\n")
        atomic_write_text(staged / "README.md", card)
        for name in FIGURES:
            if (found.path / name).is_file():
                shutil.copyfile(found.path / name, staged / name)
        names = sorted(p.name for p in staged.iterdir())
        _move_into(staged, to, names)
    except (OSError, SafetensorError) as exc:  # a full or read-only disk: safetensors says so in its own error
        _discard(staged)
        raise VitxError(f"--to {to}: cannot write the export ({write_reason(exc)})") from None
    except BaseException:  # Ctrl-C, a bug: the staging folder goes with it
        _discard(staged)
        raise
    return Exported(to, found, num_classes, tuple(names))


def _discard(staged: Path | None) -> None:
    """Remove the export's own staging folder (never `to`), if it was made and is still there."""
    if staged is not None:
        shutil.rmtree(staged, ignore_errors=True)


__all__ = ["EXPORT_FILES", "FIGURES", "Exported", "build_checked", "export_run", "hub_config", "linear_head",
           "pretrained_cfg", "timm_arch"]
