"""The command line that started the running `vitx` command, so that config.json can say how a run was made
(a model card shows it; `vitx export` reconstructs it from the settings for runs started from Python)."""
from __future__ import annotations

import contextlib
import shlex
from typing import Iterator

_current: list[str] | None = None


@contextlib.contextmanager
def recording(argv: list[str]) -> Iterator[None]:
    """While a command runs, `command()` is `vitx ARGV` (shell-quoted). Cleared afterwards, so a run started
    later from Python in the same process (tests, notebooks) is not credited to the last command."""
    global _current
    before, _current = _current, ["vitx", *argv]
    try:
        yield
    finally:
        _current = before


def command(fresh: bool = False) -> str | None:
    """The running command line, or None when vitx is used as a library. `fresh`: it made a new run, so a
    `--resume` in it found nothing to resume and is left out (the line says how the run was made)."""
    return None if _current is None else shlex.join([a for a in _current if not (fresh and a == "--resume")])
