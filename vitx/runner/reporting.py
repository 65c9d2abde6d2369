"""What a run reports: a rich progress bar for people, metrics.jsonl (and Accelerate trackers) for tools."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

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


def make_console() -> Console:
    """stderr console; when it is a file or pipe (CI, logs), wide enough that the progress line is not cut."""
    console = Console(stderr=True)
    return console if console.is_terminal else Console(stderr=True, width=max(console.width, 132))


def progress_bar(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}  lr {task.fields[lr]}  {task.fields[speed]} img/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
    )
