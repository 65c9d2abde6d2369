"""What a run reports: a rich progress bar on a terminal, plain or JSON lines in a log, metrics.jsonl (and
Accelerate trackers) for tools."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress

from ..checkpoint import atomic_write_text


class MetricsLog:
    """Append-only JSON lines, one per logging step. On resume, entries after the checkpoint are dropped
    (the killed run logged steps that will be trained again)."""

    def __init__(self, path: Path, resume_step: int | None) -> None:
        self.path = path
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines()
                    if line.strip() and _step(line) is not None and _step(line) <= resume_step]
            atomic_write_text(path, "".join(line + "\n" for line in kept))
        elif path.exists():
            path.unlink()
        self._fh = open(path, "a")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _step(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None  # a line torn by a kill


def make_console(quiet: bool = False) -> Console:
    """A run's report (its header, progress, results) goes to stdout, so `vitx pretrain > log.txt` or `| tee` keep
    it; errors go to stderr (the CLI prints them itself). In a file or pipe the console is wide enough that a line
    is not cut. `quiet`: it prints nothing."""
    console = Console(quiet=quiet)
    return console if console.is_terminal else Console(quiet=quiet, width=max(console.width, 132))


SHOWN_FIRST = ("loss", "top1", "lr", "images_per_s")  # the rest of a log step's metrics follow in name order


class Progress:
    """How a run shows its progress: a rich bar on a terminal; one plain, flushed line per log step where the
    output is a file or pipe (a batch job's log, `nohup`, `| tee`: a bar there renders only at the end); JSON
    lines for scripts. `--quiet` (a quiet console) shows nothing."""

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
            self._write(json.dumps(record))
        else:
            self._write(self.line(step, metrics, elapsed, eta))

    def line(self, step: int, metrics: dict[str, float], elapsed: float, eta: float) -> str:
        """`pretrain 50/1200 (4%) | loss 2.301 | lr 1.00e-04 | 812 img/s | val_top1 0.41 | 0:00:31, ETA 0:11:50`"""
        keys = [k for k in SHOWN_FIRST if k in metrics] + sorted(k for k in metrics if k not in SHOWN_FIRST)
        formats = {"lr": "lr {:.2e}", "images_per_s": "{:.1f} img/s"}
        parts = [formats[k].format(metrics[k]) if k in formats else f"{k} {metrics[k]:.4g}" for k in keys]
        return " | ".join([f"{self.label} {step}/{self.total} ({step / max(self.total, 1):.0%})", *parts,
                           f"{_clock(elapsed)}, ETA {_clock(eta)}"])

    def _write(self, text: str) -> None:
        self.console.file.write(text + "\n")
        self.console.file.flush()


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"

