"""What a run reports: a rich progress bar on a terminal, plain or JSON lines in a log, metrics.jsonl (and
Accelerate trackers) for tools."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from ..console import say
from ..errors import in_the_way
from ..safe_io import atomic_write_text
from ..backbones.droppath import describe as describe_drop_path
from .config import describe_optimisation, micro_batch
from .threads import describe as describe_threads



def strict_json(record: dict[str, Any]) -> str:
    """A record as strict JSON (RFC 8259: no NaN or Infinity, which log collectors', jq's and pandas' parsers
    reject): a non-finite figure is null, and `nonfinite` names those keys (`plots.series.read_metrics` reads them
    back as NaN). Log lines and metrics.jsonl both."""
    bad = [k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)]
    cleaned = {k: _finite_or_null(v) for k, v in record.items()}
    return json.dumps({**cleaned, **({"nonfinite": bad} if bad else {})}, allow_nan=False)


def _finite_or_null(value: Any) -> Any:
    """A value with every non-finite float in it null (nested ones too: a watch entry's figure)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    return value


class MetricsLog:
    """Append-only JSON lines, one per logging step. On resume, entries after the checkpoint are dropped
    (the killed run logged steps that will be trained again)."""

    def __init__(self, path: Path, resume_step: int | None) -> None:
        self.path = path
        try:
            self._open(resume_step)
        except OSError as exc:  # a folder of that name, an immutable file: one line, the checkpoints untouched
            raise in_the_way(path, exc) from None

    def _open(self, resume_step: int | None) -> None:
        path = self.path
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
                    if line.strip() and _step(line) is not None and _step(line) <= resume_step]
            atomic_write_text(path, "".join(line + "\n" for line in kept))
        elif path.exists():
            path.unlink()
        self._fh = open(path, "a")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(strict_json(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _step(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError, OverflowError):
        return None  # a line torn by a kill (or a step of 1e400)


SHOWN_FIRST = ("loss", "top1", "lr", "images_per_s", "input_wait")  # the rest of a log step's metrics follow in name order


class Progress:
    """How a run shows its progress: a rich bar on a terminal; one plain, flushed line per log step where the
    output is a file or pipe (a batch job's log, `nohup`, `| tee`: a bar there renders only at the end); JSON
    lines for scripts, on stdout whatever the console's stream. `--quiet` (a quiet console) shows nothing."""

    def __init__(self, console: Console, fmt: str, enabled: bool) -> None:
        if fmt == "auto":
            fmt = "bar" if console.is_terminal else "lines"
        self.console, self.fmt = console, fmt
        self.enabled = enabled and not console.quiet
        self._bar: RichProgress | None = None
        self._task: Any = None
        self.label, self.total, self.first, self._t0 = "", 0, 0, 0.0

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()

    def start(self, label: str, total: int, completed: int) -> None:
        """A run of `total` steps begins (or resumes) at `completed`."""
        self.label, self.total, self.first, self._t0 = label, total, completed, time.monotonic()
        if self.enabled and self.fmt == "bar":
            self._bar = RichProgress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}  lr {task.fields[lr]}  {task.fields[speed]} img/s"),
                TimeElapsedColumn(), TimeRemainingColumn(), console=self.console)
            self._bar.start()
            self._task = self._bar.add_task(label, total=total, completed=completed, loss="-", lr="-", speed="-")

    def advance(self, step: int) -> None:
        """Every step: only the bar moves."""
        if self._bar is not None:
            self._bar.update(self._task, completed=step)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """A log step's metrics (loss, lr, img/s and whatever evaluation or monitor figures came with them)."""
        if not self.enabled:
            return
        elapsed = time.monotonic() - self._t0
        eta = (self.total - step) * elapsed / (step - self.first) if step > self.first else float("nan")
        if self.fmt == "bar":
            self._bar.update(self._task, loss=f"{metrics.get('loss', float('nan')):.4f}",
                             lr=f"{metrics.get('lr', 0):.2e}", speed=f"{metrics.get('images_per_s', 0):.1f}")
        elif self.fmt == "json":
            record = {"run": self.label, "step": step, "total": self.total, **metrics,
                      "elapsed_s": round(elapsed, 1), "eta_s": round(eta, 1) if math.isfinite(eta) else None}
            self._write(strict_json(record))
        else:
            self._write(self.line(step, metrics, elapsed, eta))

    def line(self, step: int, metrics: dict[str, float], elapsed: float, eta: float) -> str:
        """`pretrain 50/1200 (4%) | loss 2.301 | lr 1.00e-04 | 812 img/s | input wait 2% | val_top1 0.41 | 0:00:31, ETA 0:11:50`"""
        keys = [k for k in SHOWN_FIRST if k in metrics] + sorted(k for k in metrics if k not in SHOWN_FIRST)
        formats = {"lr": "lr {:.2e}", "images_per_s": "{:.1f} img/s", "input_wait": "input wait {:.0%}"}
        parts = [formats[k].format(metrics[k]) if k in formats else f"{k} {metrics[k]:.4g}" for k in keys]
        return " | ".join([f"{self.label} {step}/{self.total} ({step / max(self.total, 1):.0%})", *parts,
                           f"{_clock(elapsed)}, ETA {_clock(eta)}"])

    def _write(self, text: str) -> None:
        out = sys.stdout if self.fmt == "json" else self.console.file  # JSON: always stdout (make_console)
        out.write(text + "\n")
        out.flush()


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"



def announce(setup: Any, resume: bool, console: Console) -> None:
    """The run's first lines (main process): what runs on what, the data and its validation, notes (sharding, a
    new --lr on resume, nothing to resume)."""
    from .. import __version__

    cfg, acc = setup.cfg, setup.accelerator
    n_params = sum(p.numel() for p in setup.objective.backbone.parameters())
    src = setup.train_source
    size = f"streamed, {src.num_shards} shard(s)" if hasattr(src, "micro_batches") else f"{len(src)} images"
    what = f"resuming {cfg.output_dir} at step {setup.start_step}" if setup.resumed_from else f"run {cfg.output_dir}"
    say(console, f"vitx {__version__}: {what} | {cfg.objective} on {cfg.model} ({n_params / 1e6:.2f}M) "
                 f"| {cfg.data} ({size}, {setup.preprocess.image_size}px) "
                 f"| {acc.num_processes} process(es) on {acc.device}")
    if "threads" in setup.record:
        say(console, describe_threads(setup.record["threads"]))
    if getattr(setup.objective, "fitted", None) is not None:  # options chosen from the data, and by whose rule
        say(console, setup.objective.fitted.line(setup.objective.name))
    say(console, describe_optimisation(cfg))
    depth = describe_stochastic_depth(setup)
    if depth:
        say(console, depth)
    validation = setup.data_info.get("validation") or {}
    if validation:
        say(console, f"data: {setup.data_info.get('layout', 'data')}, labels {setup.data_info.get('labels')} | "
                     f"validation: {validation['how']}")
    note = getattr(src, "sharding_note", lambda world: None)(acc.num_processes)
    if note:
        say(console, f"note: {note}")
    if resume and setup.resumed_from is None:
        say(console, f"nothing to resume in {cfg.output_dir}; starting a new run")
    start = setup.record.get("start") if setup.resumed_from is None else None
    if isinstance(start, dict):  # --from: where each part of the model came from (runs/continuation.py)
        step = f", step {start['step']}" if start.get("step") is not None else ""
        say(console, f"start: {start['from']} ({start['kind']}{step})")
        for part, where in start.get("parts", {}).items():
            say(console, f"  {part}: {where}")
    changed = setup.record.get("lr_changes", [])
    if changed and changed[-1]["step"] == setup.start_step:
        say(console, f"note: --lr {cfg.lr:g} from step {setup.start_step} (the run had {changed[-1]['from']:g}); "
                     "the schedule goes on with the new peak (config.json: lr_changes)")


def describe_stochastic_depth(setup: Any) -> str | None:
    """The run's stochastic-depth line (`droppath.describe`), with the samples of each forward where the objective
    runs its micro-batch once (a multi-crop objective's forwards carry its crops × the micro-batch)."""
    forwards = None if setup.objective.views() else micro_batch(setup.cfg, setup.accelerator.num_processes)
    return describe_drop_path(setup.objective.backbone, forwards)


def finished(last: dict[str, Any], output_dir: str, console: Console) -> None:
    """The run's last line: the final figures and where the weights are."""
    shown = ", ".join(f"{k} {last[k]:.4g}" for k in ("loss", "top1", "val_loss", "val_top1") if k in last)
    say(console, f"done: step {last.get('step')}: {shown} → {output_dir}/model.safetensors")
