"""The command that made a run, for its model card: as config.json recorded it (runs started with the `vitx`
command), else rebuilt from the settings it records (runs started from Python): every setting that differs from
the default, as the command's own option, or `--set key=value` where the command has none."""
from __future__ import annotations

import json
import shlex
from typing import Any

from ..settings import defaults as settings_defaults
from ..settings import flags
from ..runs.trained import TrainedRun


def _flag(key: str, value: Any, flag: str) -> list[str]:
    if isinstance(value, bool):
        return [flag if value else "--no-" + flag[2:]]
    if key == "adapters":
        return [a for adapter in value for a in (flag, str(adapter))]
    if isinstance(value, list):
        return [flag, ",".join(str(v) for v in value)]
    return [flag, str(value)]


ALWAYS = {"pretrain": ("objective", "model", "data", "steps"), "transfer": ("task",)}  # shown even at defaults


def rebuild(command: str, settings: dict[str, Any], config: type) -> str:
    """`vitx COMMAND` with the settings that differ from `config`'s defaults (shell-quoted): each as its own
    option where it has one (vitx/settings.py), else `--set key=value`."""
    defaults, options = settings_defaults(config), flags(config)
    parts = ["vitx", command]
    for key, value in settings.items():
        shown = key in ALWAYS.get(command, ()) or (key in defaults and value != defaults[key])
        brought = key == "model" and settings.get("init")  # the start's architecture, recorded: --init brings it
        if not shown or value is None or brought:  # None: the default's "not set"
            continue
        parts += _flag(key, value, options[key]) if key in options else ["--set", f"{key}={json.dumps(value)}"]
    return shlex.join(parts)


def command_line(run: TrainedRun) -> tuple[str, bool]:
    """The command that made `run` and whether it was recorded (False: rebuilt from its settings)."""
    recorded = run.config.get("command")
    if recorded:
        return str(recorded), True
    if run.is_transfer:
        from ..transfer.config import TransferConfig

        settings = dict(run.config["transfer"])
        if run.task_dir is not None:
            settings["output_dir"] = str(run.task_dir.parent)
        return rebuild("transfer", settings, TransferConfig), False
    from ..runner.config import PretrainConfig

    return rebuild("pretrain", run.config.get("run", {}), PretrainConfig), False


__all__ = ["command_line", "rebuild"]
