"""`vitx pretrain --from`: what a new pre-training continues from, part by part.

The source is opened once (`open_init`): a vitx run or checkpoint folder, a timm model folder (timm's
`save_for_hf` layout), `timm:<name>`, or a .safetensors file of released weights (`released.py`: DINO's layout).
The backbone comes from any of them; the objective's other parts (those its `init_parts` declares: MAE's decoder,
DINO's head, teacher and centre) from a vitx run of the same objective or from a released checkpoint the objective
reads (`released_state`); the moving average of the weights from a run that kept one, when this run keeps one too.
A part the source lacks starts new, as does one sized by other data (`sized_by_data`: the supervised classifier
of other classes), a classifier nothing here uses is dropped: each is said in the run's header and recorded in
config.json (`record`). Position embeddings of another grid are resampled as the backbone's are; any other shape
that does not fit is one line naming the part. Nothing is unpickled."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..adapters.posemb import grid_of, resample_pos_embed
from ..backbones.timm_any import timm_folder
from ..safe_io import nonfinite, read_weights
from ..errors import VitxError, first_line
from .released import DINO_MEAN, DINO_STD, PICKLED, Released, build_vit, read_released, refuse_pickle
from .rundir import weights_file
from .start import accepted_starts, is_timm_folder, load_start, start_input
from .trained import read_run

NEW = "new"
# what a released checkpoint's other weights are, for the line that drops them (`released.py`'s names)
RELEASED_GROUPS = (("student.head.", "head"), ("teacher.", "teacher"), ("dino_loss.", "centre"),
                   ("classifier.", "classifier"))


@dataclass
class Continuation:
    """A --from source, opened: its backbone (resized by `fit`), the input it expects, the state the objective's
    parts may be restored from, and where each part of the new run came from (`parts`, filled as it is built)."""

    given: str  # --from as the user gave it
    kind: str  # what it is, for the header: "vitx mae run", "timm model folder", "DINO checkpoint", ...
    backbone: nn.Module
    normal: dict[str, tuple[float, ...]]  # the mean and std its weights expect
    where: str  # how the header names it: "runs/mae step 42"
    step: int | None = None
    objective: str | None = None  # a vitx run's objective, and the --objective it was built with
    spec: str | None = None
    state: dict[str, torch.Tensor] = field(default_factory=dict)  # the source objective's own state (a vitx run)
    released: Released | None = None
    ema_from: Path | None = None  # a vitx run that kept a moving average of its weights
    classifier: str | None = None  # a timm folder's classifier ("1000-class classifier"), dropped
    dropped: dict[str, str] = field(default_factory=dict)  # part → why it is not carried
    parts: dict[str, str] = field(default_factory=dict)  # part → where it came from, in the order restored
    grid: tuple[int, int] = (0, 0)  # the source's patch grid (its position embeddings')
    weights: dict[str, torch.Tensor] = field(default_factory=dict)  # the backbone's, as `fit` made it
    class_names: list[str] | None = None  # the classes a vitx run trained on (its config.json's data)

    # ---- the backbone -------------------------------------------------------------------------------------------
    def fit(self, image_size: int | None) -> nn.Module:
        """The backbone at `image_size` (None: the source's), its position embeddings resampled (bicubic) as a
        transfer's are; said beside the backbone's source."""
        from ..adapters import resize_backbone

        self.grid = grid_of(self.backbone)
        said = self.where
        if image_size is not None:
            self.backbone = resize_backbone(self.backbone, image_size)
            new = grid_of(self.backbone)
            if new != self.grid:
                said += f" (position embeddings resampled {_shown(self.grid)} → {_shown(new)})"
        self.parts["backbone"] = said
        self.weights = {k: v.detach().clone() for k, v in self.backbone.state_dict().items()}
        return self.backbone

    # ---- the objective's parts ----------------------------------------------------------------------------------
    def restore(self, objective: nn.Module, name: str, class_names: list[str] | None = None) -> None:
        """Load each part `objective.init_parts()` declares from the source where it holds that part; say where
        each came from, and what of the source this objective does not use. `class_names`: this run's data's, for
        the parts the data sizes (a classifier of as many other classes starts new, as one of another count)."""
        # an objective may initialise the backbone it is given (MAE's masked ViT re-draws every weight and sets
        # sine-cosine positions): the start's weights are loaded again once it is built
        _, unexpected = objective.backbone.load_state_dict(self.weights, strict=False)
        if unexpected:
            raise VitxError(f"--from {self.given}: {name} changed the backbone's layout ({unexpected[0]})")
        source, reason = self._objective_state(objective, name)
        if self.classifier:  # a timm folder's classifier: a backbone start never carries it
            self.dropped["head"] = f"dropped (timm's {self.classifier}, {_unused(objective, name)})"
        own, declared = objective.state_dict(), _declared(objective)
        for part, prefixes in declared.items():
            wanted = {k for k in own if k.startswith(prefixes)}
            given = {k: v for k, v in source.items() if k.startswith(prefixes)}
            if not given:
                self.parts[part] = NEW + (f" ({reason})" if reason else "")
                continue
            missing, extra = sorted(wanted - set(given)), sorted(set(given) - wanted)
            if missing or extra:
                shown = ", ".join((missing + extra)[:2])
                raise VitxError(self._misfit(part, name, f"{len(missing)} weights missing, {len(extra)} not this "
                                                         f"run's: {shown}"))
            other = next((k for k in sorted(given) if given[k].shape != own[k].shape), None)
            if other is not None and part in objective.sized_by_data:  # (a classifier of other classes)
                self.parts[part] = (f"{NEW} (sized by other data: {other} is {_shape(given[other])} there, "
                                    f"{_shape(own[other])} here)")
                continue
            if part in objective.sized_by_data and None not in (class_names, self.class_names) \
                    and list(class_names) != list(self.class_names):  # as many classes, other ones (or order)
                pairs = [(i, a, b) for i, (a, b) in enumerate(zip(self.class_names, class_names)) if a != b]
                said = f": class {pairs[0][0]} is {pairs[0][1]!r} there, {pairs[0][2]!r} here" if pairs else ""
                self.parts[part] = f"{NEW} (trained on other classes{said})"
                continue
            fitted = {k: self._fitted(part, name, k, given[k], v, objective) for k, v in own.items() if k in given}
            objective.load_state_dict(fitted, strict=False)
            resampled = [k for k in fitted if fitted[k].shape != given[k].shape and k.endswith("pos_embed")]
            notes = [f"{', '.join(resampled)} resampled as the backbone's"] if resampled else []
            if part in objective.sized_by_data and None in (class_names, self.class_names):
                notes.append("its class names unrecorded " + ("there" if self.class_names is None else "here") +
                             ": not compared")
            self.parts[part] = self.where + (f" ({'; '.join(notes)})" if notes else "")
        covered = tuple(p for prefixes in declared.values() for p in prefixes) + ("backbone.",)
        for rest in dict.fromkeys(k.split(".")[0] for k in own if not k.startswith(covered)):
            why = f"{name} declares no part --from restores" if source else reason
            self.parts[rest] = f"{NEW} ({why})"
        self.parts.update(self.dropped)

    def _objective_state(self, objective: nn.Module, name: str) -> tuple[dict[str, torch.Tensor], str]:
        """(the source's state in this objective's keys, why there is none); what of the source it leaves unused
        is added to `dropped`."""
        if self.released is not None:
            rest = self.released.rest
            mapped = objective.released_state(self.released.layout, rest) if rest else {}
            groups = [label for prefix, label in RELEASED_GROUPS if any(k.startswith(prefix) for k in rest)]
            if groups and not mapped:
                owner = "DINO's" if self.released.layout == "dino" else "the file's"
                self.dropped[", ".join(groups)] = f"dropped ({owner}, {_unused(objective, name)})"
            other = [k[len("other."):] for k in rest if k.startswith("other.")]
            if other:  # beside the ViT in the file (an MAE checkpoint's decoder, say)
                shown = ", ".join(other[:2]) + (f" and {len(other) - 2} more" if len(other) > 2 else "")
                self.dropped["other weights"] = f"dropped ({shown}: not the ViT's)"
            dino = self.released.layout == "dino"
            return mapped, "DINO's checkpoint holds none" if dino else "the file holds a backbone only"
        if self.objective is None:
            return {}, f"a {self.kind} holds none"
        if self.objective != name:
            return {}, f"{self.given} is a {self.objective} run: only its backbone continues"
        return self.state, f"{self.given} holds none"

    def _fitted(self, part: str, name: str, key: str, value: torch.Tensor, target: torch.Tensor,
                objective: nn.Module) -> torch.Tensor:
        """`value` in the shape of `target`: as it is, or (position embeddings of another grid) resampled."""
        if value.shape == target.shape:
            return value.to(target.dtype)
        if value.numel() == target.numel() and key.endswith("center"):  # a centre kept (1, K) or (1, 1, K)
            return value.reshape(target.shape).to(target.dtype)
        if key.endswith("pos_embed") and value.dim() == target.dim() == 3 and value.shape[::2] == target.shape[::2]:
            new = grid_of(objective.backbone)
            prefix = target.shape[1] - new[0] * new[1]  # the [class] (and register) positions, kept
            positions = value.shape[1] - prefix  # the source's patch positions
            old = self.grid if self.grid[0] * self.grid[1] == positions else (math.isqrt(max(positions, 0)),) * 2
            if prefix >= 0 and positions > 0 and old[0] * old[1] == positions:
                return resample_pos_embed(value, new, old, prefix).to(target.dtype)
        raise VitxError(self._misfit(part, name, f"{key} is {_shape(value)} there, {_shape(target)} here"))

    def _misfit(self, part: str, name: str, what: str) -> str:
        hint = (f"; give --objective \"{self.spec}\" as it was trained" if self.spec and self.objective == name
                else "; give the objective the options it was trained with")
        return f"--from {self.given}: its {part} does not fit this run's {name} ({what}){hint}"

    # ---- the moving average -------------------------------------------------------------------------------------
    def restore_ema(self, ema: nn.Module | None, objective: nn.Module) -> None:
        """Continue the source run's moving average of the weights (backbone and the parts restored) when this run
        keeps one (`--ema-decay`); say so either way."""
        if ema is None:
            if self.ema_from is not None:
                self.parts["ema"] = f"not continued ({self.given} kept one: add --ema-decay to continue it)"
            return
        if self.ema_from is None:
            self.parts["ema"] = f"{NEW} (from the weights above)"
            return
        restored = tuple(prefix for part, prefixes in _declared(objective).items()
                         if self.parts.get(part, "").startswith(self.where) for prefix in prefixes)
        state = {f"backbone.{k}": v for k, v in read_weights(weights_file(self.ema_from, ema=True)).items()}
        heads = weights_file(self.ema_from, ema=True, heads=True)
        if restored and heads.is_file():
            state.update({k: v for k, v in read_weights(heads).items() if k.startswith(restored)})
        own = ema.module.state_dict()
        unknown = sorted(k for k in state if k not in own)
        if unknown:
            raise VitxError(f"--from {self.given}: its moving average does not fit this run ({unknown[0]})")
        ema.module.load_state_dict({k: self._fitted("moving average", "", k, v, own[k], ema.module)
                                    for k, v in state.items()}, strict=False)
        self.parts["ema"] = self.where

    # ---- what is said and recorded ------------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """config.json's `start`: the source and where each part came from."""
        return {"from": self.given, "kind": self.kind, "step": self.step, "objective": self.objective,
                "parts": dict(self.parts)}


def open_init(given: str, use_ema: bool = False, seed: int = 0) -> Continuation:
    """The --from source, opened and checked: every way it cannot be read is one line (VitxError) that starts
    with the flag."""
    try:
        found = _open(given, use_ema, seed)
    except VitxError as exc:
        said = str(exc)
        if said.startswith(("--from", "--use-ema")):
            raise
        raise VitxError(f"--from {given}: {said}") from None
    bad = nonfinite({**found.backbone.state_dict(), **found.state})
    if bad:  # (every step would be skipped as non-finite, and the error then blamed the lr)
        raise VitxError(f"--from {given}: {bad[0]} holds NaN or infinite values; these weights cannot be trained on")
    return found


def _open(given: str, use_ema: bool, seed: int) -> Continuation:
    path = Path(given).expanduser()
    if given.startswith("timm:"):
        backbone = load_start(given, None, seed, "--from", use_ema, files=True)
        return Continuation(given, "timm", backbone, _normal(given, backbone), given)
    if path.is_file():
        return _open_file(given, path, use_ema)
    if is_timm_folder(path):
        timm_folder(str(path))  # its config and that its weights are safetensors (a pytorch_model.bin is never read)
        classifier = timm_classifier(path)  # (its weights' header read first: a damaged file is one line)
        backbone = load_start(given, None, seed, "--from", use_ema, files=True)
        architecture = backbone.vitx_record["name"].removeprefix("timm:")
        return Continuation(given, f"timm model folder: {architecture}", backbone, _normal(given, backbone), given,
                            classifier=classifier)
    backbone = load_start(given, None, seed, "--from", use_ema, files=True)  # (a missing path, a non-ViT: one line)
    run = read_run(path)  # its config.json checked as export and predict check it (an edited field: one line)
    config = run.config
    record = config.get("objective") if isinstance(config.get("objective"), dict) else {}
    objective = record.get("name") if isinstance(record.get("name"), str) else None
    step = config.get("step") if isinstance(config.get("step"), int) else None
    heads = weights_file(path, use_ema, heads=True)
    found = Continuation(given, f"vitx {objective or '?'} run", backbone, _normal(given, backbone),
                         f"{given} step {step if step is not None else '?'}" + (" (moving average)" if use_ema else ""),
                         step, objective, _spec(objective, record.get("options")),
                         read_weights(heads) if heads.is_file() else {})
    if weights_file(path, ema=True).is_file():
        found.ema_from = path
    names, recorded = run.class_names()
    found.class_names = names if recorded else None
    return found


def _open_file(given: str, path: Path, use_ema: bool) -> Continuation:
    """A local weights file: safetensors in DINO's or a bare ViT's layout; a pickle refused with its conversion."""
    if path.suffix.lower() in PICKLED:
        refuse_pickle(path)
    if path.suffix.lower() != ".safetensors":
        raise VitxError(f"--from {given} is a file vitx does not read; give {ACCEPTED}")
    if use_ema:
        raise VitxError(f"--use-ema reads a vitx run's moving average of its weights; --from {given} is a weights "
                        "file (drop --use-ema)")
    released = read_released(path)
    backbone, said = build_vit(released)
    kind = f"{released.described}: {said}"
    return Continuation(given, kind, backbone, {"mean": DINO_MEAN, "std": DINO_STD}, given, released=released)


ACCEPTED = accepted_starts(files=True)  # what pre-training's --from reads


def timm_classifier(folder: Path) -> str | None:
    """'1000-class classifier' when a timm folder's weights hold a classifier (its pretrained_cfg's
    `classifier`, timm's `head`) that a backbone start drops; None when they hold none."""
    from safetensors import SafetensorError, safe_open

    from ..safe_io import read_json_object

    config = read_json_object(folder / "config.json") or {}
    name = (config.get("pretrained_cfg") or {}).get("classifier", "head") if isinstance(
        config.get("pretrained_cfg"), dict) else "head"
    names = name if isinstance(name, (list, tuple)) else [name]
    try:
        with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
            keys = [k for k in weights.keys() if any(k.startswith(f"{n}.") for n in names)]
            shape = weights.get_slice(keys[0]).get_shape() if keys else None
    except (SafetensorError, OSError, ValueError) as exc:
        raise VitxError(f"--from {folder}/model.safetensors is not a readable safetensors file "
                        f"({first_line(exc)})") from None
    if not keys:
        return None
    return f"{shape[0]}-class classifier" if shape else "classifier"


def _normal(given: str, backbone: nn.Module) -> dict[str, tuple[float, ...]]:
    """The mean and std a start's weights expect (`start_input`: timm's pretrained_cfg, a vitx run's record)."""
    found = start_input(given, backbone)
    return {"mean": tuple(found["mean"]), "std": tuple(found["std"])}


def _spec(name: str | None, options: Any) -> str | None:
    """The `--objective` a run was trained with, from its config.json's record (the options it was built with,
    those fitted to its data among them)."""
    if name is None or not isinstance(options, dict):
        return None
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in options.items())})" if options else name


def _unused(objective: nn.Module, name: str) -> str:
    """Why weights of the source's own heads are dropped: this objective has no use for them, or trains its own."""
    return f"{name} starts its own head" if getattr(objective, "needs_labels", False) else f"not used by {name}"


def _declared(objective: nn.Module) -> dict[str, tuple[str, ...]]:
    """The objective's `init_parts`, each part's prefixes as a tuple (a plugin may give one as a string)."""
    return {part: (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
            for part, prefixes in objective.init_parts().items()}


def _shown(grid: tuple[int, int]) -> str:
    return f"{grid[0]}×{grid[1]}"


def _shape(tensor: torch.Tensor) -> str:
    return "×".join(str(int(s)) for s in tensor.shape)


__all__ = ["ACCEPTED", "Continuation", "open_init", "timm_classifier"]
