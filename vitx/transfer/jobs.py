"""`vitx transfer` in child processes: `--jobs K` runs K of a suite's work items at once on this machine, and
`vitx reproduce` its transfers side by side. Each child gets its share of the machine: of the cores as
OpenMP/MKL threads (two runs with the cores each on 2 cores slowed each other 5-20×), of the GPUs one in turn
(several per GPU when there are more jobs than GPUs); its output goes to its own log file. --jobs's children
and their settings are this process's alone (`<output>/logs/<host>-<pid>-<random>/`: several machines may run
--jobs on one shared folder). Every child is this process's alone: in its own session (a signal to the terminal's
or the job's process group reaches only this process), stopped by it (a stop signal or Ctrl-C passed on at once,
so that it counts as the one request it is: runner/preemption.py's `adopt`; none starts after one) and dead with
it."""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.console import Console

from ..console import say
from ..safe_io import atomic_write_text
from ..errors import Preempted, SelectionPending, VitxError
from ..runner.preemption import adopt, pass_on, stopping
from ..runner.threads import granted_cores
from ..runs.rundir import RunDir
from .leases import JOURNAL
from .config import TransferConfig
from .items import Item

TICK = 2.0  # seconds between looks at the children and the leases journal


def cores() -> int:
    """The cores this process may use (its CPU affinity, CPU quota or SLURM CPUs per task: runner/threads.py)."""
    return granted_cores()[0]


def visible_gpus() -> list[str]:
    """The GPUs this process sees, as CUDA_VISIBLE_DEVICES names them (none without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    listed = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed or [str(i) for i in range(torch.cuda.device_count())]


def share_env(index: int, jobs: int, gpus: list[str]) -> dict[str, str]:
    """The environment of the `index`-th of `jobs` processes: cores // jobs threads, GPU index mod #GPUs."""
    threads = str(max(1, cores() // jobs))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1"}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    return env


def write_recipe(path: Path, settings: dict[str, Any], section: str = "transfer") -> Path:
    """A run's settings as a recipe file (`section`: the command they configure), which the child's command line
    checks as any recipe."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, f"[{section}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()
                                                     if v is not None))
    return path


def _plugin_args() -> list[str]:
    """--plugin for each plugin file or module this process loaded (installed ones load themselves)."""
    from .. import discovery as plugins

    return [a for name, origin in plugins.loaded.items() if origin.startswith(("file ", "module "))
            for a in ("--plugin", name)]


def _dies_with(parent: int) -> Callable[[], None] | None:
    """What a child runs before `vitx` starts: it gets SIGKILL when `parent` dies, even by SIGKILL (Linux). libc
    is opened here, in the parent: the child, forked from a process with threads (the reproduction's job pool),
    then runs only a system call and no loader or allocator lock it might find held."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def die_with() -> None:
        prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(0)

    return die_with


def start_vitx(command: str, recipe: Path, log: Path, index: int = 0, jobs: int = 1, extra: tuple[str, ...] = (),
               gpus: list[str] | None = None, append: bool = True) -> subprocess.Popen:
    """`vitx COMMAND --recipe RECIPE EXTRA` (a transfer, or the reproduction's pre-trainings) as the `index`-th of
    `jobs` processes, its output in `log` (added to it, or replacing it). This process alone stops it (its own
    session; a stop this command gets is passed on to it) and it dies with this process. After a stop none
    starts (Preempted)."""
    if stopping():
        raise Preempted(f"vitx {command} not started: this process was asked to stop")
    log.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "vitx", *_plugin_args(), command, "--recipe", str(recipe), *extra]
    with open(log, "ab" if append else "wb") as out:
        child = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=share_env(index, jobs, visible_gpus() if gpus is None else gpus),
                                 start_new_session=True, preexec_fn=_dies_with(os.getpid()))
    adopt(child)  # (a stop that came while it started is passed on now)
    return child


def last_line(log: Path) -> str:
    """A child's last line (its error, when it failed)."""
    with contextlib.suppress(OSError):
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""
    return ""


class Journal:
    """The leases journal read as it grows: each child's items taken and finished, for the progress view."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, path.stat().st_size if path.is_file() else 0

    def new_lines(self) -> list[list[str]]:
        """[time, holder, event, item] of each line since the last call."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
        self.offset += len(whole)
        return [parts for line in whole.decode(errors="replace").splitlines()
                if len(parts := line.split(" ", 4)) >= 4]


def child_settings(cfg: TransferConfig, jobs: int | None = None) -> dict[str, Any]:
    """The settings each job runs with: the parent's, one item at a time each, with its share of the cores for
    loading when the workers are not given. Without --wait a job still waits for sweep points of the parent's
    share (its siblings run them), and stops, pending, for those of other shards, as the parent would."""
    share = max(1, cores() // (jobs or cfg.jobs))  # (`jobs`: how many run, when fewer than --jobs)
    settings = {**cfg.to_dict(), "jobs": 1, "dry_run": False}
    if cfg.workers < 0:
        settings["workers"] = max(0, share - 1)
    return settings


def jobs_folder(output: Path) -> Path:
    """This process's folder for its children's settings and logs, `<output>/logs/<host>-<pid>-<random>`: other
    processes with --jobs on the same shared folder (other machines, other containers) have their own."""
    folder = output / "logs" / f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
    folder.mkdir(parents=True)
    return folder


def run_jobs(cfg: TransferConfig, mine: list[Item], done: Any, console: Console) -> list[tuple[int, int, Path]]:
    """Run `cfg.jobs` children `vitx transfer … --jobs 1 --resume` on the suite's folder; they share its (or the
    shard's) items through the leases. Prints one line per item a job takes or finishes; `done(item)` says which
    are on disk. Returns the failed ones: (job, exit status, log). Stopped by a signal (forwarded to the jobs:
    none takes an item after it), it says what is on disk then: its share complete, it returns as if they had
    finished; else it raises Preempted (exit 75) with the count."""
    left = sum(not done(item) for item in mine)
    if not left:
        return []
    jobs = min(cfg.jobs, left)  # a job more than the items left would start a process with nothing to do
    folder = jobs_folder(Path(cfg.output_dir))
    recipe = write_recipe(folder / "jobs.toml", child_settings(cfg, jobs))
    gpus = visible_gpus()
    journal, tally = Journal(Path(cfg.output_dir) / JOURNAL), Tally(mine, done)
    if jobs < cfg.jobs:
        say(console, f"--jobs {cfg.jobs}: {jobs} job(s), one per item left")
    if not gpus and jobs > cores():
        say(console, f"warning: {jobs} jobs on {cores()} core(s): they share the cores, each slower than alone "
                     f"(--jobs {cores()} or fewer runs them side by side)")
    children: list[subprocess.Popen] = []
    job_of: dict[str, int] = {}  # "host:pid" as the journal names a holder → job
    stop: list[str] = []  # the stop signals received
    with _stop_on_signals(stop, lambda: _forward(children)):  # (also while they stop: a repeat is not passed on)
        try:
            for i in range(jobs):
                if stop:  # (stopped while they start: no more)
                    break
                children.append(start_vitx("transfer", recipe, folder / f"job{i}.log", i, jobs, ("--resume",), gpus))
                job_of[f"{socket.gethostname()}:{children[-1].pid}"] = i
            place = f"GPUs {', '.join(gpus)}" if gpus else f"{max(1, cores() // jobs)} thread(s) each"
            say(console, f"{jobs} jobs on {len(mine)} item(s) ({place}); logs in {folder}/job<i>.log")
            while any(p.poll() is None for p in children) and not stop:
                time.sleep(TICK)  # (a stop signal is forwarded by its handler at once, not after this)
                _show(journal, job_of, tally, console)
        finally:  # however this process stops (but SIGKILL: then they die with it, PR_SET_PDEATHSIG)
            stop_children(children)
            _show(journal, job_of, tally, console)
    if stop:
        left = [item for item in mine if not done(item)]
        if not left:  # they finished the last items as it came: nothing is left to continue
            say(console, f"{stop[0]}: the jobs stopped with all {len(mine)} item(s) on disk")
            return []
        begun = sum(RunDir(item.folder).latest() is not None for item in left)  # (a closed form has none)
        said = {0: "none of them begun", 1: "one of them begun and checkpointed"}.get(
            begun, f"{begun} of them begun and checkpointed")
        raise Preempted(f"{stop[0]}: the {jobs} jobs stopped with {len(mine) - len(left)} of {len(mine)} item(s) "
                        f"on disk and {len(left)} left ({said}); run the same command with --resume to continue "
                        "the suite")
    return [(i, p.returncode, folder / f"job{i}.log") for i, p in enumerate(children) if p.returncode]


def stop_children(children: list[subprocess.Popen], wait: float = 120) -> None:
    """Stop the children still running (SIGTERM, unless a stop was passed on to them already): each checkpoints
    and stops (exit 75; --resume continues), or after `wait` seconds is killed."""
    _forward(children)
    for p in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=wait)
        if p.poll() is None:
            p.kill()
            p.wait()


def _forward(children: list[subprocess.Popen]) -> None:
    """SIGTERM to each running child, once (a second one, more than a second later, would be a second request:
    stop at once without a checkpoint)."""
    for p in children:
        pass_on(p, signal.SIGTERM)


class Tally:
    """`[k/N done]` as the journal tells it: the items on disk when the jobs began, and each one finished since,
    counted at its own line (the disk, read when the lines are, would count items finished after them)."""

    def __init__(self, mine: list[Item], done: Callable[[Item], bool]) -> None:
        self.keys = {item.key for item in mine}
        self.finished = {item.key for item in mine if done(item)}

    def count(self, event: str, key: str) -> str:
        if event == "done" and key in self.keys:
            self.finished.add(key)
        return f"[{len(self.finished)}/{len(self.keys)} done]"


def _show(journal: Journal, job_of: dict[str, int], tally: Tally, console: Console) -> None:
    for _, holder, event, key, *_ in journal.new_lines():
        shown = tally.count(event, key)
        job = job_of.get(holder)
        if job is not None and event != "skipped":
            say(console, f"{shown} job {job}: {event} {key}")


@contextlib.contextmanager
def _stop_on_signals(stop: list[str], forward: Callable[[], None]) -> Iterator[None]:
    """While the jobs run, SIGTERM or SIGUSR1 to this process (a scheduler's preemption) is added to `stop` and
    forwarded to the jobs at once (`forward`): each stops with a checkpoint (a child's stop request repeated more
    than a second later is a second one, which exits without). No lock is taken in the handler: the main thread,
    which it interrupts, may hold it. The previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}

    def handle(signum: int, frame: Any) -> None:
        stop.append(signal.Signals(signum).name)
        forward()

    for sig in before:
        signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def describe_failures(failed: list[tuple[int, int, Path]]) -> VitxError:
    """One line for the jobs that failed: the first's own last line and where its log is. Jobs that only stopped
    pending (exit 4: their final runs wait for other shards' sweep points) make this process pending too, with
    the first one's line."""
    if all(code == SelectionPending.exit_code for _, code, _ in failed):
        line = last_line(failed[0][2])
        return SelectionPending(line.removeprefix(f"{SelectionPending.label}: ") or f"see {failed[0][2]}")
    job, code, log = next(f for f in failed if f[1] != SelectionPending.exit_code)
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    said = last_line(log).removeprefix(f"{VitxError.label}: ")
    return VitxError(f"job {job} failed with exit status {code}{more}: {said[:400]}; see {log}; "
                     "--resume continues the suite")


__all__ = ["cores", "describe_failures", "jobs_folder", "run_jobs", "share_env", "start_vitx", "stop_children",
           "visible_gpus", "write_recipe"]
