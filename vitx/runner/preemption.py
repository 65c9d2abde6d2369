"""Stop requests: the signals a scheduler sends before it kills a job (SLURM, Kubernetes and spot instances send
SIGTERM, or SIGUSR1 with `--signal`), and Ctrl-C.

The rule, for every command (`command_stops`, around each one the command line runs):
- Inside a training loop (`StopRequests`) a stop signal is a request the loop answers at the next step
  boundary: finish the optimiser step in progress, write a checkpoint at that step (every process takes part),
  exit 75. A loop waiting for a step's input is at a step boundary: the request is answered at once, without
  waiting for a batch that may be minutes away (a stalled loader, a first batch that never comes).
- Anywhere else (start-up, between a suite's items, an evaluation) the command stops at once: one line, exit 75
  (EX_TEMPFAIL: a requeue script reruns it); what was written before is kept, and --resume continues. The line
  is true to what is on disk: while a run writes its folder (`writing`), it names the run's last checkpoint, or
  says that none was written (then --resume starts the run over).
- A request that came at a run's last step, which just finishes, stays pending: a suite's process starts no
  further item (`check`).
- A second signal exits at once, as the signal's default action would have (143 for SIGTERM), after one line
  saying so. A repeat within REPEAT_S of the first is the same request delivered twice (a scheduler signals
  the whole process group and a launcher forwards it again): it is not a second one.
- Ctrl-C stops at once: one line, exit 130.
- Child processes a command started (`adopt`: a reproduction's pre-trainings and transfers, --jobs) get the stop
  signal or Ctrl-C passed on at once, each once; none is started after it.
A stop acted on at once is raised as `Stop`, a BaseException like KeyboardInterrupt: no `except Exception` on
its way (a figure's warning, say) can take it for a failure and carry on."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Iterator, Protocol

from ..errors import Interrupted, Preempted, VitxError

REPEAT_S = 1.0  # a signal this soon after the first is the first delivered again, not a second request
AGAIN_S = 0.05  # a stop Python ignored in a finalizer is raised again this much later
SCHEDULER_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # stops acted on from a command's first moment


def parse_signals(names: str) -> list[signal.Signals]:
    """`"TERM,USR1"` → [SIGTERM, SIGUSR1]; empty: none. An unknown name is a user error."""
    chosen = []
    for name in filter(None, (n.strip().upper().removeprefix("SIG") for n in names.split(","))):
        sig = getattr(signal, f"SIG{name}", None)
        if not isinstance(sig, signal.Signals) or sig in (signal.SIGKILL, signal.SIGSTOP):
            raise VitxError(f"--stop-signals: '{name}' is not a signal a process can catch (e.g. TERM,USR1,INT)")
        chosen.append(sig)
    return chosen


class Folder(Protocol):
    """A run's folder (vitx.runs.rundir.RunDir), as a stop's line reads it."""

    path: Path

    def latest(self, before: int | None = None) -> Path | None: ...


CONTINUES = "given --resume, a run or a suite continues from what is on disk"  # (a loop run outside the CLI)


def on_disk(run: Folder | None, continues: str = CONTINUES) -> str:
    """What a stop acted on at once leaves, true to what is on disk: the run's last checkpoint (its step), or that
    none was written; `run` None (no run writing, or a command that writes none): how to go on, and how the
    command `continues` from what it wrote ("": it keeps nothing between calls)."""
    if run is None:
        return "run the same command again" + (f" ({continues})" if continues else "")
    again = on_disk(None, continues)
    try:
        latest = run.latest()
    except OSError:  # (an unreadable folder: the handler must still stop, in one line)
        return again
    if latest is None:
        return f"no checkpoint of {run.path} had been written yet (--resume would start the run over)"
    from ..runs.rundir import step_number  # (here: a stop before any run never loads it)

    return f"the last checkpoint, {latest} (step {step_number(latest)}), is intact: continue from it with --resume"


class Stop(BaseException):
    """A stop acted on at once, raised from a signal handler wherever the main thread was; `error` is what the
    command line says (its label, line and exit status)."""

    def __init__(self, error: VitxError) -> None:
        super().__init__(str(error))
        self.error = error


class Waiting(BaseException):
    """Raised into a training loop's wait for a step's input by a stop signal: the loop answers it there."""


@dataclass
class Requests:
    """The stop requests of one command (or, for a loop run outside the command line, of that loop)."""

    pid: int = field(default_factory=os.getpid)  # (a forked child inherits the handlers, not the requests)
    received: str | None = None  # the first stop signal's name
    at: float = 0.0  # when it came (time.monotonic)
    answered: bool = False  # acted on: a stop is under way
    loops: int = 0  # training loops running, which answer a request at their next step boundary
    waiting: bool = False  # a loop waits for a step's input, where it answers a request at once
    doing: str = ""  # what the command is doing, for the line of a stop acted on at once
    run: Folder | None = None  # the run writing its folder now (`writing`), whose checkpoints that line names
    before: dict[int, object] = field(default_factory=dict)  # the signals' handlers before the command's
    hook: Any = None  # sys.unraisablehook before the command's
    swallowed: Stop | Waiting | None = None  # a stop Python ignored in a finalizer, to be raised again
    again: threading.Timer | None = None  # what sends its signal again (its handler raises `swallowed`)
    children: list[Any] = field(default_factory=list)  # child processes (subprocess.Popen) that stop with it
    passed: int | None = None  # the stop signal passed on to them (no child starts after it)
    continues: str = CONTINUES  # how the command continues from what it wrote ("": an evaluation keeps nothing)

    def raise_swallowed(self) -> None:
        """Raise the stop Python ignored, where the signal sent again came; a `Waiting` only while the loop still
        waits (else its request, recorded, is answered at the step's end)."""
        if self.again is not None:
            self.again.cancel()  # (when another signal came first)
        stop, self.swallowed, self.again = self.swallowed, None, None
        if isinstance(stop, Stop) or (isinstance(stop, Waiting) and self.waiting):
            raise stop

    def line(self, name: str) -> str:
        doing = f" {self.doing}" if self.doing else ""
        return f"{name}{doing}: stopped at once; {on_disk(self.run, self.continues)}"


_current: Requests | None = None
_started_in = os.getpid()  # the console script's process (its forked children inherit the early handlers)


def _handle(signum: int, frame: FrameType | None) -> None:
    state = _current
    if state is None or state.pid != os.getpid():  # a forked child's inherited handler: the default action
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if state.again is not None:  # (the signal sent again for a stop Python ignored: not a new one)
        state.raise_swallowed()
        return
    name, now = signal.Signals(signum).name, time.monotonic()
    if state.received is not None and now - state.at < REPEAT_S:
        return  # the same request, delivered twice: it is on its way
    _pass_on_all(state, signum)
    if state.received is not None:  # asked twice: stop now, without the checkpoint, and say so
        os.write(2, f"stopped: a second stop signal ({name}): exiting at once, without a checkpoint of this "
                    f"step; {on_disk(state.run, state.continues)}\n".encode())
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    state.received, state.at = name, now
    if state.waiting:
        raise Waiting()
    if state.loops == 0:
        state.answered = True
        raise Stop(Preempted(state.line(name)))


CTRL_C = "Ctrl-C"


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if _current is not None and _current.pid != os.getpid():
        raise KeyboardInterrupt  # (a forked child: Python's own handler)
    if _current is not None and _current.again is not None:  # (sent again for a stop Python ignored)
        _current.raise_swallowed()
        return
    if _current is not None:
        _pass_on_all(_current, signum)
    raise Stop(Interrupted(f"{CTRL_C}; " + (on_disk(_current.run, _current.continues) if _current is not None
                                             else on_disk(None))))


def adopt(child: Any) -> None:
    """`child` (a subprocess.Popen in its own session, which no terminal or job signal reaches) stops with this
    command: a stop signal or Ctrl-C is passed on to it at once, and was already if one came before it started.
    Outside a command (a notebook, a test) nothing is passed on."""
    state = _current
    if state is None or state.pid != os.getpid():
        return
    state.children.append(child)
    if state.passed is not None:
        pass_on(child, state.passed)


def adopted() -> list[Any]:
    """The child processes this command started that stop with it (`adopt`)."""
    return list(_current.children) if _current is not None else []


def stopping() -> bool:
    """Whether a stop signal or Ctrl-C came and was passed on to the children: none is started any more."""
    return _current is not None and _current.passed is not None


def pass_on(child: Any, signum: int) -> None:
    """Send `signum` to `child` while it runs, once: a repeat more than REPEAT_S later would be a second
    request, which stops it at once without a checkpoint. A Ctrl-C goes on as SIGTERM: the child checkpoints at
    its step boundary (exit 75) rather than stopping where it is, so none of its work is lost."""
    if child.poll() is None and not getattr(child, "vitx_stopped", False):
        child.vitx_stopped = True
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM if signum == signal.SIGINT else signum)


def _pass_on_all(state: Requests, signum: int) -> None:
    if state.passed is None:
        state.passed = signum
    for child in list(state.children):  # (a thread may adopt one meanwhile)
        pass_on(child, signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def starting(argv0: str | None = None) -> None:
    """In the console script (`vitx ...`, `python -m vitx ...`), from vitx's first line (vitx/__init__.py) until
    its command line takes over (`command_stops`): a stop signal or Ctrl-C ends it at once, with the line a
    command would give and its status, rather than Python's default (143 and no word, or a KeyboardInterrupt
    traceback). Nothing has been written yet. Before that only Python's own start-up is left (its site
    packages, the path hooks of editable installs), which no code of vitx's runs in. Elsewhere (`import vitx`
    in a notebook, a test, a plugin's program) the signals are left alone."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if not _the_script(argv0) or not _main_thread():
        return
    for sig in SCHEDULER_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _before_the_command)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _before_the_command)


def _the_script(argv0: str) -> bool:
    """Whether this process is `vitx`: its console script, or `python -m vitx` (while the package is imported
    for it, sys.argv[0] is still "-m": the command line as given tells which module runs)."""
    if os.path.basename(argv0) == "vitx" or argv0.endswith(os.path.join("vitx", "__main__.py")):
        return True
    given = list(getattr(sys, "orig_argv", []))
    return argv0 == "-m" and "-m" in given and given[given.index("-m") + 1:given.index("-m") + 2] == ["vitx"]


def _before_the_command(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _started_in:  # (a forked child: the default action)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    name = signal.Signals(signum).name
    said = CTRL_C if signum == signal.SIGINT else name
    error: VitxError = (Interrupted if signum == signal.SIGINT else Preempted)(
        f"{said} as the command started, before it began: nothing was written; run the same command again")
    os.write(2, f"{error.label}: {error}\n".encode())
    os._exit(error.exit_code)


@contextlib.contextmanager
def command_stops() -> Iterator[Requests]:
    """While a command runs: SIGTERM and SIGUSR1 (unless ignored where it was started) stop it as the rule says,
    and Ctrl-C with one line and status 130 (where SIGINT has Python's own handler: a shell's background job
    inherits it ignored). Only the main thread can take signals; elsewhere (a notebook's worker thread)
    they keep their actions. The previous handlers come back after."""
    global _current
    previous, state = _current, Requests()
    if _main_thread():
        for sig in SCHEDULER_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                state.before[sig] = signal.signal(sig, _handle)
        if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _before_the_command):
            state.before[signal.SIGINT] = signal.signal(signal.SIGINT, _interrupt)
    _current, state.hook, sys.unraisablehook = state, sys.unraisablehook, _unraisable
    try:
        yield state
    except SystemExit as done:  # (how typer ends a command that succeeded)
        if isinstance(state.swallowed, Stop) and done.code in (0, None):
            raise state.swallowed from None  # ignored in a finalizer at the very end, and not raised again yet
        raise
    finally:
        _current, sys.unraisablehook = previous, state.hook
        if state.again is not None:
            state.again.cancel()
        for sig, handler in state.before.items():
            signal.signal(sig, handler)
    if isinstance(state.swallowed, Stop):
        raise state.swallowed


def _unraisable(unraisable: Any) -> None:
    """Python ignores an exception raised in a finalizer (a `__del__`, a weakref callback, a generator the
    collector closes) after passing it here: a stop that landed there would be lost and the command carry on.
    It is raised again where it can stop the command: its signal is sent again a moment later (after this hook has
    returned), and the handler raises it."""
    state = _current
    if state is None or not isinstance(unraisable.exc_value, (Stop, Waiting)) or state.pid != os.getpid():
        (state.hook if state is not None else sys.__unraisablehook__)(unraisable)
        return
    state.swallowed = unraisable.exc_value
    for sig in (signal.SIGINT, *SCHEDULER_SIGNALS):
        if signal.getsignal(sig) in (_interrupt, _handle):
            state.again = threading.Timer(AGAIN_S, os.kill, (os.getpid(), sig))
            state.again.daemon = True
            state.again.start()
            return


def continues_with(how: str) -> None:
    """How the running command continues from what it wrote, for its stop lines (`on_disk`): a command that
    resumes says so as it starts; the console script's others keep nothing between calls ("")."""
    if _current is not None and _current.pid == os.getpid():
        _current.continues = how


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """`what` the command is doing (\"during start-up\"), for the line of a stop acted on at once meanwhile."""
    state = _current
    if state is None:
        yield
        return
    before, state.doing = state.doing, what
    try:
        yield
    finally:
        state.doing = before


@contextlib.contextmanager
def writing(run: Folder) -> Iterator[None]:
    """While a run writes into its folder: a stop acted on at once names its last checkpoint, or says there is
    none yet (`on_disk`), read from the disk when the stop comes."""
    state = _current
    if state is None:
        yield
        return
    before, state.run = state.run, run
    try:
        yield
    finally:
        state.run = before


def exiting() -> None:
    """The console script's command is over; only the interpreter's exit is left, seconds of teardown in C once
    torch is loaded, during which Python gives the signals their default actions back (a Ctrl-C there killed a
    finished run with status -2 and no word). A stop signal or Ctrl-C then is ignored: the process ends as the
    command did, with its status."""
    if _main_thread():
        for sig in (*SCHEDULER_SIGNALS, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)


def pending() -> str | None:
    """The signal of a stop request not acted on yet (one that came at a run's last step), else None."""
    state = _current
    return state.received if state is not None and state.received and not state.answered else None


def check(line: str) -> None:
    """Stop here, with `line` after the signal's name, when a request is pending (a suite's process, before it
    takes another item)."""
    name = pending()
    if name is not None:
        assert _current is not None
        _current.answered = True
        raise Preempted(f"{name} {line}")


class StopRequests:
    """While a training loop runs: the chosen signals set `received` (the loop answers it at the next step
    boundary) instead of stopping the command at once; SIGTERM and SIGUSR1 when not chosen
    (`--stop-signals ''`) keep the actions they had before the command. The previous handlers come back on exit.
    Only the main thread can install handlers: elsewhere (a notebook's worker thread) the signals keep their
    actions."""

    def __init__(self, signals: list[signal.Signals]) -> None:
        self.signals = signals
        self._previous: dict[signal.Signals, object] = {}
        self._state: Requests | None = None
        self._own = False  # no command around the loop: the requests are the loop's own

    @property
    def received(self) -> str | None:
        return self._state.received if self._state is not None else None

    def __enter__(self) -> "StopRequests":
        global _current
        self._own = _current is None
        if self._own:
            _current = Requests()
        self._state = _current
        self._state.loops += 1
        if _main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, _handle)
            for sig in set(SCHEDULER_SIGNALS) - set(self.signals):
                if sig in self._state.before:
                    before = self._state.before[sig]  # (vitx's own from the script's first moment: the default's)
                    before = signal.SIG_DFL if before is _before_the_command else before
                    self._previous[sig] = signal.signal(sig, before)  # type: ignore[arg-type]
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        global _current
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()
        assert self._state is not None
        self._state.loops -= 1
        self._state.waiting = False
        if self._own:
            _current = None

    def answered(self) -> None:
        """The loop acted on the request (it checkpoints and stops)."""
        if self._state is not None:
            self._state.answered = True

    @contextlib.contextmanager
    def at_once(self, allowed: bool = True) -> Iterator[None]:
        """The loop waits for a step's input: a stop signal meanwhile raises `Waiting` into the wait (`allowed`:
        where every process can answer it there). A request already received is raised at the start."""
        state = self._state
        if not allowed or state is None:
            yield
            return
        if state.received is not None and not state.answered:
            raise Waiting()
        state.waiting = True
        try:
            yield
        finally:
            state.waiting = False


__all__ = ["CTRL_C", "REPEAT_S", "Folder", "Requests", "Stop", "StopRequests", "Waiting", "adopt", "adopted", "check",
           "command_stops", "continues_with", "doing", "exiting", "on_disk", "parse_signals", "pass_on", "pending",
           "starting", "stopping", "writing"]
