"""What a page reads from a folder, and nothing else: config.json, metrics.jsonl, the checkpoints, the lock that
says a run is writing now. The pages show these numbers as they are on disk; where they summarise (the last
value of a metric, the median speed) they say so.
"""
from __future__ import annotations

import fcntl
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..safe_io import read_record
from ..errors import VitxError
from ..plots.series import read_metrics_counted
from ..runs.rundir import EMA, MARKER, TEACHER, RunDir

REPORT = "report.html"  # a run's (or a transfer's) own page, beside curves.png


def held_by_another(folder: Path) -> bool:
    """Whether a process holds the run folder's lock (`.lock`, RunDir.exclusive): the run is being written now.
    Asked with a shared lock taken and let go at once, from a process that never held it (releasing a POSIX lock
    in the process that holds it would drop that process's lock)."""
    lock = folder / ".lock"
    try:
        fh = open(lock, "r")
    except OSError:
        return False
    with fh:
        try:
            fcntl.lockf(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.lockf(fh, fcntl.LOCK_UN)
    return False


@dataclass(frozen=True)
class Changed:
    """A setting whose value differs from its default, with the help that says what it does."""

    name: str
    value: Any
    default: Any
    help: str


def changed_settings(values: dict[str, Any], config: type, skip: tuple[str, ...] = ()) -> list[Changed]:
    """The settings in `values` (a config.json record) that differ from `config`'s declared defaults, in the
    order --help lists them; names the config no longer declares are left out."""
    from ..settings import declared
    from ..settings import defaults as settings_defaults

    defaults = settings_defaults(config)
    rows = []
    for field in declared(config):
        name = field.name
        if name in values and name not in skip and values[name] != defaults.get(name):
            help_ = str(field.metadata.get("help", "")).replace("\\[", "[")  # (rich's escape, for --help)
            rows.append(Changed(name, values[name], defaults.get(name), help_))
    return rows


def rebuilt_command(command: str, settings: dict[str, Any], config: type) -> str:
    """`vitx COMMAND ...` from recorded settings (export's rule: each setting that differs from its default)."""
    from ..export.command import rebuild

    return rebuild(command, settings, config)


@dataclass
class Run:
    """A pre-training run folder (or a transfer's final run) as its files hold it."""

    path: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]
    unreadable: int = 0  # metrics.jsonl lines that are not a metrics record (a kill tears at most the last one)

    @property
    def settings(self) -> dict[str, Any]:
        """The run's settings as they are named now (`init`, recorded before --from was its name, is `start`)."""
        from ..runner.config import recorded_now

        return recorded_now(self.config.get("run") or {})

    @property
    def transfer(self) -> dict[str, Any] | None:
        return self.config.get("transfer")

    @property
    def step(self) -> int:
        """The step of the run's latest checkpoint (what model.safetensors holds)."""
        return int(self.config.get("step") or 0)

    @property
    def steps(self) -> int | None:
        return self.settings.get("steps")

    @property
    def logged(self) -> int:
        """The last step in metrics.jsonl (a stopped run may have logged past its last checkpoint)."""
        return max((int(r["step"]) for r in self.records), default=0)

    def command(self) -> tuple[str, bool]:
        """The command that made the run and whether it was recorded (False: rebuilt from its settings)."""
        recorded = self.config.get("command")
        if recorded:
            return str(recorded), True
        if self.transfer is not None:
            from ..transfer.config import TransferConfig

            return rebuilt_command("transfer", self.transfer, TransferConfig), False
        from ..runner.config import PretrainConfig

        return rebuilt_command("pretrain", self.settings, PretrainConfig), False

    def changed(self) -> list[Changed]:
        if self.transfer is not None:
            from ..transfer.config import TransferConfig

            return changed_settings(self.transfer, TransferConfig)
        from ..runner.config import PretrainConfig

        return changed_settings(self.settings, PretrainConfig)

    def last(self, key: str) -> tuple[int, Any] | None:
        """(step, value) of the last record holding a number for `key` (nan and inf too: a diverged metric is
        said; a value that is no number, an edited line's, is not a metric)."""
        return next(((int(r["step"]), r[key]) for r in reversed(self.records) if _numeric(r.get(key))), None)

    def first(self, key: str) -> tuple[int, Any] | None:
        return next(((int(r["step"]), r[key]) for r in self.records if _numeric(r.get(key))), None)

    def metric_keys(self) -> list[str]:
        """Every key with a number in some record (nan included), in the order they first appear."""
        return list(dict.fromkeys(k for r in self.records for k, v in r.items() if k != "step" and _numeric(v)))

    def checkpoints(self) -> list[dict[str, Any]]:
        """Each complete checkpoint: its folder, step, size on disk and what it holds beyond the weights."""
        found = []
        for folder in RunDir(self.path).steps():
            if not (folder / MARKER).exists():
                continue
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            extra = [label for name, label in ((EMA, "EMA"), (TEACHER, "teacher")) if (folder / name).is_file()]
            found.append({"name": folder.name, "step": RunDir.step_of(folder), "bytes": size, "extra": extra})
        return found

    def parameters(self) -> int | None:
        """The backbone's parameter count, from model.safetensors' header (no tensor is read)."""
        from ..backbones.spec import weight_shapes

        weights = self.path / "model.safetensors"
        if not weights.is_file():
            return None
        try:
            shapes = weight_shapes(weights)
        except VitxError:
            return None
        total = 0
        for shape in shapes.values():
            count = 1
            for n in shape:
                count *= n
            total += count
        return total

    def speed(self) -> dict[str, float] | None:
        """The logged speed, summarised: median, lowest and highest images/s over the log steps, and the median
        share of time the loop waited for its input."""
        speeds = [float(r["images_per_s"]) for r in self.records if isinstance(r.get("images_per_s"), (int, float))]
        waits = [float(r["input_wait"]) for r in self.records if isinstance(r.get("input_wait"), (int, float))]
        if not speeds:
            return None
        return {"median": statistics.median(speeds), "low": min(speeds), "high": max(speeds), "logs": len(speeds),
                **({"input_wait": statistics.median(waits)} if waits else {})}


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def open_run(path: Path) -> Run:
    """A run folder's config.json and metrics.jsonl; one line when it is not a run."""
    config = read_record(path / "config.json")
    if config is not None:
        from ..runs.trained import check_recorded

        check_recorded(f"{path}/config.json", config)  # (its step and settings, as export checks them)
    records, unreadable = read_metrics_counted(path) if (path / "metrics.jsonl").is_file() else ([], 0)
    if config is None and records:  # a run before its first checkpoint: its metrics, not yet its config.json
        config = {"run": {}}
    if config is None or not isinstance(config.get("run"), dict):
        raise VitxError(f"{path}/config.json is missing or not a vitx run's (no run record)")
    return Run(path, config, records, unreadable)


__all__ = ["Changed", "REPORT", "Run", "changed_settings", "held_by_another", "open_run",
           "rebuilt_command"]
