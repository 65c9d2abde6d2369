"""The command that made a run, for its model card: as config.json recorded it (runs started with the `vitx`
command), else rebuilt from the settings it records (runs started from Python): every setting that differs from
the default, as the command's own option, or `--set key=value` where the command has none."""
from __future__ import annotations

import json
import shlex
from typing import Any

from ..settings import defaults as settings_defaults
from ..settings import as_flags, declared, flags
from ..settings.groups import SCRATCH, new_model
from ..runs.trained import TrainedRun


ALWAYS = {"pretrain": ("objective", "model", "data", "steps"), "transfer": ("task",)}  # shown even at defaults


def rebuild(command: str, settings: dict[str, Any], config: type) -> str:
    """`vitx COMMAND` with the settings that differ from `config`'s defaults (shell-quoted): each as its own
    option where it has one (vitx/settings/), else `--set key=value`."""
    defaults, options = settings_defaults(config), flags(config)
    parts = ["vitx", command]
    first = ALWAYS.get(command, ())  # what the command is about, then the rest as --help lists them
    order = {name: i for i, name in enumerate([*first, *(f.name for f in declared(config) if f.name not in first)])}
    objective_gave = {"from_objective", *(settings.get("from_objective") or ())}  # --objective brings them
    for key, value in sorted(settings.items(), key=lambda item: order.get(item[0], len(order))):
        shown = key in ALWAYS.get(command, ()) or (key in defaults and value != defaults[key])
        brought = key == "model" and not new_model(settings.get("start", SCRATCH))  # --from brings its architecture
        if not shown or value is None or brought or key in objective_gave:  # None: the default's "not set"
            continue
        parts += as_flags({key: value}, config) if key in options else ["--set", f"{key}={json.dumps(value)}"]
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
    from ..runner.config import PretrainConfig, recorded_now

    return rebuild("pretrain", recorded_now(run.config.get("run", {})), PretrainConfig), False


__all__ = ["command_line", "rebuild"]
