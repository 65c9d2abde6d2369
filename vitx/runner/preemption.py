"""Stop requests: the signals a scheduler sends before it kills a job (SLURM, Kubernetes and spot instances send
SIGTERM, or SIGUSR1 with `--signal`), turned into a request that the loop answers at the next step boundary:
finish the optimiser step in progress, write a checkpoint at that step (every process takes part), exit 75.
A second signal exits at once, as the signal's default action would have, after one line saying so. A repeat
within REPEAT_S of the first is the same request delivered twice (a scheduler signals the whole process group
and a launcher forwards it again): it is not a second one, so the checkpoint is still written."""
from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType, TracebackType

from ..errors import VitxError

REPEAT_S = 1.0  # a signal this soon after the first is the first delivered again, not a second request

def parse_signals(names: str) -> list[signal.Signals]:
    """`"TERM,USR1"` → [SIGTERM, SIGUSR1]; empty: none. An unknown name is a user error."""
    chosen = []
    for name in filter(None, (n.strip().upper().removeprefix("SIG") for n in names.split(","))):
        sig = getattr(signal, f"SIG{name}", None)
        if not isinstance(sig, signal.Signals) or sig in (signal.SIGKILL, signal.SIGSTOP):
            raise VitxError(f"--stop-signals: '{name}' is not a signal a process can catch (e.g. TERM,USR1,INT)")
        chosen.append(sig)
    return chosen


class StopRequests:
    """While active, the chosen signals set `received` instead of killing the process; the previous handlers
    come back on exit. Only the main thread can install handlers: elsewhere (a notebook's worker thread) the
    signals keep their default action."""

    def __init__(self, signals: list[signal.Signals]) -> None:
        self.signals = signals
        self.received: str | None = None
        self._at = 0.0  # when `received` came (time.monotonic)
        self._previous: dict[signal.Signals, object] = {}

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None and time.monotonic() - self._at < REPEAT_S:
            return  # the same request, delivered twice: the checkpoint is on its way
        if self.received is not None:  # asked twice: stop now, without the checkpoint, and say so
            os.write(2, f"stopped: a second stop signal ({name}): exiting at once, without a checkpoint of this "
                        "step; the checkpoints already written are intact (run the same command with --resume to "
                        "continue from the last)\n".encode())
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.received, self._at = name, time.monotonic()
