"""A finished run, as the commands that use one (`vitx predict`, `vitx export`) find it: a pre-training run or
checkpoint directory, or a transfer given as its output directory (one task), a task's directory, or the final
retrained model's directory. Everything else is one clear error, not a traceback later.

Reads config.json and safetensors only; nothing is unpickled.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..safe_io import read_config, read_json_object
from ..errors import VitxError

if TYPE_CHECKING:
    import torch
    import torch.nn as nn

    from ..data.transforms import Preprocess

RUN_HELP = ("a pre-training run or checkpoint directory, or a transfer: its --output-dir (one task), a task's "
            "directory (<output>/<suite>-<task>) or its final/ model")


@dataclass(frozen=True)
class TrainedRun:
    """Where a run's model is (`path`: config.json, model.safetensors, heads.safetensors) and, for a transfer,
    the task's directory (transfer.json, result.json)."""

    path: Path
    config: dict[str, Any]
    task_dir: Path | None = None
    ema: bool = False  # --use-ema: the moving average of the weights (ema.safetensors, ema_heads.safetensors)
    teacher: bool = False  # --export-teacher: the objective's teacher backbone (teacher.safetensors)

    @property
    def weights(self) -> Path:
        """The backbone's weights: model.safetensors, the average's ema.safetensors, or the teacher's."""
        from .rundir import weights_file

        return weights_file(self.path, self.ema, teacher=self.teacher)

    @property
    def heads(self) -> Path:
        """The heads' weights: heads.safetensors, or the average's ema_heads.safetensors."""
        from .rundir import weights_file

        return weights_file(self.path, self.ema, heads=True)

    @property
    def is_transfer(self) -> bool:
        return "transfer" in self.config

    @property
    def objective(self) -> str:
        return str(self.config.get("objective", {}).get("name", "?"))

    @property
    def num_classes(self) -> int | None:
        return self.config.get("data", {}).get("num_classes")

    def class_names(self) -> tuple[list[str], bool]:
        """The class names and whether the run recorded them (else "0", "1", ...: indices as text)."""
        names = self.config.get("data", {}).get("class_names")
        k = int(self.num_classes or 0)
        if names and len(names) == k:
            return [str(n) for n in names], True
        return [str(i) for i in range(k)], False

    def preprocess(self) -> "Preprocess":
        """The run's evaluation transform (`.eval()` then `.normalise()`), exactly as it evaluated."""
        from ..data.transforms import Preprocess

        return Preprocess.from_dict(self.config["preprocess"], f"{self.path}/config.json preprocess")

    def result(self) -> dict[str, Any] | None:
        """A transfer's result.json (test accuracy, sweep, choice); None for a pre-training, or a transfer that
        has not finished."""
        return read_result(self.task_dir) if self.task_dir else None

    def metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl, one dict per logged step (empty when absent, e.g. in a checkpoint directory)."""
        from ..plots.series import read_metrics  # pure Python: no matplotlib

        path = self.path / "metrics.jsonl"
        return read_metrics(path) if path.is_file() else []


MAX_CLASSES = 1_000_000  # far above any label set; a larger count was edited in, and would take all the memory
# what a model card and an export's config.json repeat from config.json, by kind: whole numbers, numbers
RECORDED_WHOLE = ("steps", "batch_size", "warmup_steps", "seed")
RECORDED_NUMBERS = ("lr", "weight_decay", "ema_decay")


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_recorded(where: str, config: dict[str, Any]) -> None:
    """The step and the training settings that an export repeats (its model card, its config.json), checked as
    their flags were: an edited `"step": "abc"` is one line, never a card that says "steps: abc"."""
    if "step" in config and not _is_whole(config["step"]):
        raise VitxError(f"{where}: step must be a whole number of steps, got {json.dumps(config['step'])[:40]}")
    run = config.get("run", {})
    for key in RECORDED_WHOLE:
        if key in run and run[key] is not None and not _is_whole(run[key]):
            raise VitxError(f"{where}: run.{key} must be a whole number, got {json.dumps(run[key])[:40]}")
    for key in RECORDED_NUMBERS:
        value = run.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise VitxError(f"{where}: run.{key} must be a number, got {json.dumps(value)[:40]}")


def start_step(start: str) -> int | None:
    """The step of the weights a vitx run or checkpoint folder `start` holds now (its config.json's), None for
    any other start: a transfer records it, so that items started later from a run trained since are refused."""
    path = Path(start).expanduser()
    if not (path / "config.json").is_file():
        return None
    step = (read_json_object(path / "config.json") or {}).get("step")
    return step if _is_whole(step) else None


def stopped_early(start: str, flag: str = "--from") -> str | None:
    """A warning line when `start` is a vitx run folder whose training stopped before its --steps (a stop
    signal, a crash): its top-level weights are its last checkpoint's, not the run it was set up to be. None for
    a finished run, a checkpoint folder given on purpose (checkpoints/step_N) and any other start."""
    from .rundir import step_number

    path = Path(start).expanduser()
    config = read_json_object(path / "config.json") if step_number(path) is None else None
    run = config.get("run") if config else None
    step, steps = (config or {}).get("step"), run.get("steps") if isinstance(run, dict) else None
    if not (_is_whole(step) and _is_whole(steps) and step < steps):
        return None
    return (f"warning: {flag} {start} stopped at step {step} of its {steps} (its last checkpoint): going on from "
            f"it as it is; `vitx pretrain --output-dir {start} --resume` finishes it")


def check_config(path: Path, config: dict[str, Any]) -> None:
    """A run's config.json checked before anything is built or read from it, as its flags were checked when it
    was made: the file may have been edited or damaged, and predict and export trust nothing they read from
    disk. The architecture must agree with the weights' shapes, the preprocessing with the architecture, the
    class count with a supervised run's classifier (other objectives' heads predict other things)."""
    from ..backbones.spec import check_saved_backbone, weight_shapes
    from ..data.transforms import Preprocess

    where = f"{path}/config.json"
    check_recorded(where, config)
    check_saved_backbone(config["backbone"], path / "model.safetensors", where)
    size = Preprocess.from_dict(config["preprocess"], f"{where} preprocess").image_size
    built = {**config["backbone"]["overrides"], **(config["backbone"].get("timm_kwargs") or {})}
    if isinstance(built.get("img_size"), int) and built["img_size"] != size:
        raise VitxError(f"{where}: preprocess image_size {size} differs from the backbone's img_size "
                        f"{built['img_size']}; this config.json does not describe its model (was it edited?)")
    if not isinstance(config.get("objective", {}).get("options", {}), dict):
        raise VitxError(f"{where}: objective.options must be an object")
    k = config.get("data", {}).get("num_classes")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_CLASSES):
        raise VitxError(f"{where}: data.num_classes must be an integer from 0 to {MAX_CLASSES}, got {json.dumps(k)[:40]}")
    names = config.get("data", {}).get("class_names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise VitxError(f"{where}: data.class_names must be a list of strings")
    if k and config.get("objective", {}).get("name") == "supervised" and (path / "heads.safetensors").is_file():
        shapes = weight_shapes(path / "heads.safetensors")
        out = shapes.get("head.bias") or shapes.get("head.fc.bias")  # a linear head's, or the tanh MLP head's
        if out is not None and out != (k,):
            raise VitxError(f"{where}: data.num_classes is {k}, but heads.safetensors classifies {out[0]} "
                            "classes; this config.json does not describe its model (was it edited?)")


def _record(path: Path) -> dict[str, Any]:
    """A run folder's config.json, with the records every reader needs, each of the right kind."""
    config = read_config(path)
    if not isinstance(config, dict) or "backbone" not in config or "preprocess" not in config:
        raise VitxError(f"{path}/config.json is not a vitx run's (no backbone or preprocess record)")
    for key in ("objective", "data", "transfer", "run"):
        if not isinstance(config.get(key, {}), dict):
            raise VitxError(f"{path}/config.json: {key} must be an object")
    return config


def read_run(path: Path) -> TrainedRun:
    """A vitx run or checkpoint folder that holds weights (pre-training's --from reads it), its config.json
    checked (`check_config`: an edited or damaged field is one line)."""
    config = _record(path)
    check_config(path, config)
    return TrainedRun(path, config)


def _model_dir(path: Path) -> TrainedRun:
    config = _record(path)
    phase = config.get("transfer", {}).get("phase")
    if phase == "sweep":
        raise VitxError(f"{path} is a sweep point of a transfer, which keeps no weights; give the task's directory "
                        f"({path.parent.parent}) for its final model")
    if not (path / "model.safetensors").is_file():
        raise VitxError(f"{path} has no model.safetensors (a run that has not saved a checkpoint yet?)")
    check_config(path, config)
    # a transfer's <task>/final, or a checkpoint inside it: <task>/final/checkpoints/step_N
    homes = (path.parent, path.parent.parent.parent) if phase is not None else ()
    return TrainedRun(path, config, next((p for p in homes if (p / "transfer.json").is_file()), None))


def read_result(task_dir: Path) -> dict[str, Any] | None:
    """A task's result.json; None while the transfer has not written it; one line when it is there but damaged
    (not a JSON object with a numeric test_top1): not taken for an unfinished transfer."""
    path = task_dir / "result.json"
    if not path.exists():
        return None
    result = read_json_object(path)
    top1 = (result or {}).get("test_top1")
    if result is None or isinstance(top1, bool) or not isinstance(top1, (int, float)):
        raise VitxError(f"{path} is damaged (not a JSON object with a numeric test_top1): vitx reads the "
                        "transfer's result from it; restore it, or run the transfer again into a new --output-dir")
    return result


def _task_dir(path: Path) -> TrainedRun:
    result = read_result(path)
    name = (result or read_json_object(path / "transfer.json") or {}).get("task", path.name)
    if result is not None and result.get("chosen") is None:
        raise VitxError(f"{path}: {name} was evaluated in closed form (few-shot least squares); no classifier was "
                        "trained or saved, so there is no model to use")
    if result is None or not (path / "final" / "model.safetensors").is_file():
        raise VitxError(f"{path}: the transfer of {name} has not finished (no final model and result.json); "
                        "continue it with `vitx transfer --resume` and the same options")
    run = _model_dir(path / "final")
    return TrainedRun(run.path, run.config, path)


def resolve_run(run: str | Path, ema: bool = False, teacher: bool = False) -> TrainedRun:
    """Find the model a RUN argument names (see `RUN_HELP`); with `ema`, its moving average of the weights; with
    `teacher`, its objective's teacher backbone."""
    from .folder import require_ema, require_teacher

    found = _resolve(run)
    if ema and teacher:
        raise VitxError("give --use-ema or --export-teacher, not both")
    if ema:
        require_ema(found.path)
    if teacher:
        require_teacher(found.path)
    return replace(found, ema=ema, teacher=teacher)


def _resolve(run: str | Path) -> TrainedRun:
    path = Path(run).expanduser()
    if not path.exists():
        raise VitxError(f"{run}: no such directory; give {RUN_HELP}")
    if path.is_file():
        raise VitxError(f"{run} is a file; give {RUN_HELP}")
    if (path / "config.json").is_file():
        return _model_dir(path)
    if (path / "transfer.json").is_file():
        return _task_dir(path)
    tasks = sorted(p for p in path.iterdir() if (p / "transfer.json").is_file())
    if len(tasks) == 1:
        return _task_dir(tasks[0])
    if tasks:
        shown = ", ".join(p.name for p in tasks[:4]) + (", ..." if len(tasks) > 4 else "")
        raise VitxError(f"{run} holds {len(tasks)} transferred tasks ({shown}); give one task's directory, "
                        f"e.g. {tasks[0]}")
    raise VitxError(f"{run} is not a vitx run (no config.json, transfer.json or task directories); give {RUN_HELP}")


def classifier_heads(run: TrainedRun) -> dict[str, "torch.Tensor"]:
    """The classifier weights of a run that has one (heads.safetensors, `head.*`), else one clear error."""
    from ..safe_io import read_weights

    if run.objective != "supervised":
        raise VitxError(f"{run.path} was pre-trained with the {run.objective} objective, which has no classifier; "
                        f"transfer it to a labelled task first (`vitx transfer --from {run.path}`) and use that")
    if not run.num_classes:
        raise VitxError(f"{run.path} records no classes (data.num_classes); it has no classifier to use")
    return read_weights(run.heads)


def load_classifier(run: TrainedRun) -> "nn.Module":
    """The run's supervised objective (backbone and head, weights loaded strictly), for `classify`."""
    from .folder import load_backbone
    from ..objectives import create_objective

    heads = classifier_heads(run)
    options = dict(run.config.get("objective", {}).get("options", {}))
    model = create_objective("supervised", load_backbone(run.path, run.ema), int(run.num_classes or 0), **options)
    try:
        missing, unexpected = model.load_state_dict(heads, strict=False)
    except RuntimeError as exc:  # a tensor of another shape (heads of another class count)
        raise VitxError(f"{run.heads} does not fit its objective's head "
                        f"({str(exc).splitlines()[-1].strip()})") from None
    missing = [k for k in missing if not k.startswith("backbone.")]
    if missing or unexpected:
        raise VitxError(f"{run.heads} does not match its objective's head "
                        f"(missing {missing[:2]}, unexpected {unexpected[:2]})")
    return model.eval()


__all__ = ["RUN_HELP", "TrainedRun", "check_config", "classifier_heads", "load_classifier", "read_result", "read_run",
           "resolve_run"]
