"""The cores a process is granted and the torch threads it computes with, so that processes sharing a machine
never oversubscribe it.

PyTorch defaults to one thread per core it sees, whatever else runs: a loader worker beside it, the CPU quota of a
container, a SLURM allotment, other PyTorch processes. On 2 cores the CPU DINO recipe went from 94.5 to 150.7
img/s on one thread instead of two (its loader worker needs the other core), and four copies of the README's
main job at once took 1.72× their fair share of time on torch's default threads, 1.02× on these
(BENCHMARKS.md). So each run computes with
the cores it is granted, shared among the machine's local processes, less one per busy loader worker. A thread
count the user gives is kept: `--threads N` first, else OMP_NUM_THREADS (which `vitx transfer --jobs` and `vitx
reproduce` set for their children). Processes the runner cannot see (other commands started beside it) are kept from harming each
other by OpenMP threads that spin only briefly before they sleep (`wait_briefly`).
"""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


def _own_cgroup_v2() -> Path:
    """This process's cgroup v2 `cpu.max` (its path from /proc/self/cgroup: a systemd slice or a job's cgroup
    on a host without a cgroup namespace), else the root one (a container sees its own cgroup as the root)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = CGROUP_V2.parent / line[3:].strip().lstrip("/") / CGROUP_V2.name
                if own.is_file():
                    return own
    except OSError:
        pass
    return CGROUP_V2


def _quota() -> int | None:
    """Whole CPUs of the process's CPU quota (cgroup v2 `cpu.max`, else v1's CFS quota); None: unlimited or
    unreadable."""
    try:
        quota, period = _own_cgroup_v2().read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        quota, period = (int(p.read_text()) for p in CGROUP_V1)
        return None if quota <= 0 else max(1, math.ceil(quota / period))
    except (OSError, ValueError):
        return None


SPIN_COUNT = "10000"  # GNU OpenMP's busy-wait before a thread sleeps: a few µs (its default is 300,000)


def wait_briefly() -> None:
    """OpenMP threads that spin only briefly between parallel regions before they sleep (GOMP_SPINCOUNT 10,000,
    unless the user set GOMP_SPINCOUNT or OMP_WAIT_POLICY): a spinning thread holds a core that a neighbouring
    process needs. On 2 cores, four 50-shot transfers at once (two threads each) took 402-449 s with GNU OpenMP's
    default spin, 175-189 s with 10,000, and one alone 48.7-49.4 s against 48.7-51.5; waiting passively (OMP_WAIT_POLICY=PASSIVE) gave 158 s together but cost a run alone 17%
    (BENCHMARKS.md). Called by the console script before torch loads (OpenMP reads it once); the processes vitx
    starts inherit it."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)


def granted_cores() -> tuple[int, str]:
    """The cores this process may use and what limits them: its CPU affinity (taskset, a SLURM or container
    allotment), the container's CPU quota, or the SLURM job's CPUs per task, whichever is fewest."""
    try:
        limits = [(len(os.sched_getaffinity(0)), "CPU affinity")]
    except AttributeError:  # not Linux
        limits = [(os.cpu_count() or 1, "the machine's cores")]
    quota = _quota()
    if quota is not None:
        limits.append((quota, "cgroup CPU quota"))
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        limits.append((int(slurm), "SLURM_CPUS_PER_TASK"))
    return min(limits, key=lambda limit: limit[0])


def local_processes() -> int:
    """How many processes of this run share the machine (LOCAL_WORLD_SIZE, which the launchers set; 1 alone)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))


def core_share() -> int:
    """This process's share of the granted cores: they divided among the run's processes on this machine."""
    return max(1, granted_cores()[0] // local_processes())


def training_workers(workers: int, source: Any, views: list[Any], on_gpu: bool = False) -> int:
    """Loader workers the training stream runs: on a CPU none for a split held in memory (nothing to decode: its
    one crop per image costs less than a worker's core takes from the step) unless the objective's crops are to
    be made (the work multi-crop workers exist for); else, and always for a GPU's step, `workers`. A GPU's
    process is busy launching kernels: cropping a held split there in turn fed ViT-B/16 1,299 img/s (input wait
    97%) where its step runs 2,713 (one H200, 2026-11-28, BENCHMARKS.md)."""
    from ..data import TensorSplit

    return 0 if isinstance(source, TensorSplit) and not views and not on_gpu else workers


def _omp_threads() -> int:
    """The outer level of OMP_NUM_THREADS ("4" or "4,2": 4), 0 when unset or a value OpenMP ignores."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdecimal() and first.isascii() else 0


def fit_threads(workers: int, given: int = 0) -> dict[str, Any]:
    """Set torch's threads to `given` (--threads), else leave OMP_NUM_THREADS's, else this process's share of
    the granted cores less its `workers` busy loader workers (at least 1); returns what was decided, for the
    header and config.json."""
    import torch  # (here: the CLI reads the settings, which read granted_cores, to print --help)

    cores, limited_by = granted_cores()
    local, share = local_processes(), core_share()
    if given:
        threads, chosen_by = given, "--threads"
    elif _omp_threads() > 0:  # (a value OpenMP ignores, "abc" or 0, is not a choice: the rule below decides)
        threads, chosen_by = torch.get_num_threads(), "OMP_NUM_THREADS"
    else:
        threads, chosen_by = max(1, share - workers), "vitx"
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return {"threads": threads, "chosen_by": chosen_by, "workers": workers, "cores": cores,
            "limited_by": limited_by, "processes_here": local,
            "openmp_wait": {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ}}


@contextmanager
def kept_threads() -> Iterator[None]:
    """torch's thread count as it was before a run fitted it (`fit_threads`): a notebook or script that calls
    `pretrain` or `transfer` in its own process gets its threads back afterwards, however the run ends."""
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def describe(fitted: dict[str, Any]) -> str:
    """The header's line: 'threads: 1 torch thread + 1 loader worker, of 2 cores (CPU affinity)'."""
    t, w = fitted["threads"], fitted["workers"]
    shared = f" shared by {fitted['processes_here']} processes" if fitted["processes_here"] > 1 else ""
    given = f" ({fitted['chosen_by']})" if fitted["chosen_by"] != "vitx" else ""
    return (f"threads: {t} torch thread{'s' if t != 1 else ''}{given} + {w} loader worker{'s' if w != 1 else ''}, "
            f"of {fitted['cores']} cores ({fitted['limited_by']}){shared}")


__all__ = ["core_share", "describe", "fit_threads", "granted_cores", "kept_threads", "local_processes",
           "training_workers", "wait_briefly"]
