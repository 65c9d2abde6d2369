"""A stop that always stops (issue 47's acceptance; not a test): signals sent at random moments of real runs.

    python benchmarks/stop_anywhere.py ctrl-c [--moments 20] [--seed 0] [--output-dir DIR]
    python benchmarks/stop_anywhere.py jobs [--moments 3] [--seed 0] [--output-dir DIR]

ctrl-c  `vitx pretrain` (vit-nano/4 at 16 px, --steps 60 --save-every 1 --eval-samples 0: a checkpoint and a
        curves.png at every step, so most of the run is checkpoint writing and figure drawing) gets SIGINT at a
        moment drawn uniformly over one uninterrupted run's length (start-up included). Each must exit 130 with
        its one line (a signal after the run's end, in the interpreter's exit, is ignored: exit 0 as the run
        ended), and `--resume` must then finish the run with curves.png.
jobs    `vitx transfer --jobs 2` on a suite of 8 items (two synthetic tasks, two sweep points and two seeds each)
        gets SIGTERM once k of its items are done (k drawn) and a moment more: while its jobs run. No item may
        be taken after the signal (leases.log), no `[k/N done]` may count an item before its own line, and the parent's exit status and line must be true to what is on disk: complete
        (summary.json) → 0; else 75 and the count of items on disk; `--resume` then completes the suite.

Each moment's row: when the signal came, the exit status, the last line, what is on disk, and the check.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VITX = [sys.executable, "-m", "vitx"]
RUN = ["pretrain", "--model", "vit-nano/4", "--image-size", "16", "--batch-size", "16", "--steps", "60",
       "--save-every", "1", "--eval-samples", "0", "--warmup-steps", "2", "--workers", "0", "--log-with", "none",
       "--log-format", "lines"]
CTRL_C = "interrupted: Ctrl-C; checkpoints already written are intact (continue a run with --resume)"
SUITE = ["transfer", "--task", "vtab/dsprites_loc,vtab/dsprites_ori", "--from", "scratch", "--model", "vit-nano/4",
         "--image-size", "16", "--shots", "20", "--batch-size", "4", "--lrs", "0.01,0.1", "--sweep-steps", "20",
         "--seeds", "0,1", "--test-samples", "16", "--workers", "0", "--no-curves", "--log-with", "none",
         "--jobs", "2"]


def _as_a_terminal_starts_it() -> None:
    """SIGINT with its default action in the child, as a terminal gives it (a shell's background job, this
    script's included, inherits it ignored, and so would every run it starts)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], log: object) -> subprocess.Popen:
    return subprocess.Popen([*VITX, *args], stdout=log, stderr=subprocess.PIPE, cwd=ROOT,
                            preexec_fn=_as_a_terminal_starts_it)


def run(args: list[str], out: Path, after: float | None = None, sig: int = signal.SIGINT) -> tuple[int, str, float]:
    """`vitx ARGS`, signalled `after` seconds in (None: not at all); (status, last stderr line, seconds)."""
    began = time.perf_counter()
    with open(out.with_suffix(".log"), "wb") as log:
        proc = start(args, log)
        if after is not None:
            try:
                proc.wait(timeout=after)
            except subprocess.TimeoutExpired:
                proc.send_signal(sig)
        err = proc.communicate()[1].decode(errors="replace")
    out.with_suffix(".err").write_text(err)
    lines = [line for line in err.splitlines() if line.strip()]
    return proc.returncode, lines[-1] if lines else "", time.perf_counter() - began


def ctrl_c(moments: int, rng: random.Random, work: Path) -> bool:
    full = work / "whole"
    code, _, length = run([*RUN, "--output-dir", str(full)], full)
    assert code == 0 and (full / "curves.png").is_file(), f"the uninterrupted run failed ({code})"
    print(f"uninterrupted run: {length:.1f} s; SIGINT at {moments} moments drawn uniformly in [0, {length:.1f}] s")
    good = late = 0
    for n in range(moments):
        out = work / f"ctrl-c-{n}"
        at = rng.uniform(0.0, length)
        code, line, _ = run([*RUN, "--output-dir", str(out)], out, at, signal.SIGINT)
        step = (json.loads((out / "config.json").read_text()).get("step") if (out / "config.json").is_file()
                else None)
        finished = "done: step 60" in out.with_suffix(".log").read_text()  # (the signal came after the run)
        again, tail, _ = run([*RUN, "--output-dir", str(out), "--resume"], out.with_name(out.name + "-resume"))
        curves = (out / "curves.png").is_file()
        said = (code, line) == (130, CTRL_C) or (finished and code == 0)
        ok = said and again == 0 and curves
        good, late = good + ok, late + (finished and code == 0)
        print(f"{at:6.1f} s: exit {code}, checkpoint at step {step}, '{line[:60]}'"
              f"{' (after the run: done)' if finished and code == 0 else ''} | --resume: exit {again}, "
              f"curves.png {'yes' if curves else 'NO'} | {'ok' if ok else 'FAILED: ' + tail}", flush=True)
    print(f"{good}/{moments} moments ok: exit 130 with its line ({good - late}), or after the run had finished exit 0 "
          f"({late}); and --resume finished with curves.png")
    return good == moments


def journal(out: Path) -> list[list[str]]:
    path = out / "leases.log"
    return [line.split(" ", 4) for line in path.read_text().splitlines()] if path.is_file() else []


def jobs(moments: int, rng: random.Random, work: Path) -> bool:
    full = work / "suite-whole"
    code, _, length = run([*SUITE, "--output-dir", str(full)], full)
    assert code == 0 and (full / "summary.json").is_file(), f"the uninterrupted suite failed ({code})"
    items = sum(1 for e in journal(full) if e[2] == "done")
    print(f"uninterrupted suite: {length:.1f} s, {items} items; SIGTERM once k items are done (k drawn in "
          f"[1, {items - 2}]) and a moment more (drawn in [0, 3] s): while the jobs run")
    good = 0
    for n in range(moments):
        out = work / f"suite-{n}"
        k, extra = rng.randint(1, items - 2), rng.uniform(0.0, 3.0)
        with open(out.with_suffix(".log"), "wb") as log:
            proc = start([*SUITE, "--output-dir", str(out)], log)
            while proc.poll() is None and sum(1 for e in journal(out) if e[2] == "done") < k:
                time.sleep(0.2)
            time.sleep(extra)
            seen = len(journal(out))  # the journal when the signal went (a take after it is a defect)
            proc.send_signal(signal.SIGTERM)
            sent = time.perf_counter()
            err = proc.communicate()[1].decode(errors="replace")
        took = time.perf_counter() - sent
        out.with_suffix(".err").write_text(err)
        lines = [line for line in err.splitlines() if line.strip()]
        line = lines[-1] if lines else ""
        later = [e for e in journal(out)[seen:] if e[2] in ("taken", "taken-over")]
        done = sum(1 for e in journal(out) if e[2] == "done")
        complete = (out / "summary.json").is_file()
        count = re.search(r"with (\d+) of (\d+) item\(s\) on disk", line)
        if complete:
            true = proc.returncode == 0
        elif count is None:  # stopped at once, before its jobs ran (start-up) or after: nothing counted
            true = proc.returncode == 75 and line.startswith("stopped: SIGTERM") and "stopped at once" in line
        else:
            true = proc.returncode == 75 and int(count.group(1)) == done and "stopped: stopped" not in line
        counters = re.findall(r"\[(\d+)/\d+ done\] job \d+: (\w+)", out.with_suffix(".log").read_text())
        finished, early = 0, []
        for shown, event in counters:  # each line's count: the items finished by then, never more
            finished += event == "done"
            if int(shown) > finished:
                early.append(shown)
        again, _, _ = run([*SUITE, "--output-dir", str(out), "--resume"], out.with_name(out.name + "-resume"))
        ok = not later and true and again == 0 and (out / "summary.json").is_file() and not early
        good += ok
        print(f"after {k} done + {extra:.1f} s: exit {proc.returncode} {took:.1f} s after the signal, {done}/{items} "
              f"items on disk, {'complete' if complete else 'not complete'}, {len(later)} taken after the signal, "
              f"{len(early)} counts ahead | '{line[:120]}' | --resume: exit {again} | {'ok' if ok else 'FAILED'}",
              flush=True)
    print(f"{good}/{moments} moments: no item taken after the signal, the status and line true to the disk")
    return good == moments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("ctrl-c", "jobs"))
    parser.add_argument("--moments", type=int, default=None, help="signals sent (default: ctrl-c 20, jobs 3)")
    parser.add_argument("--seed", type=int, default=0, help="draws the moments")
    parser.add_argument("--output-dir", default=None, help="where the runs go (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(args.output_dir or tempfile.mkdtemp(prefix="vitx-stop-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rng = random.Random(args.seed)
    passed = ctrl_c(args.moments or 20, rng, work) if args.what == "ctrl-c" else jobs(args.moments or 3, rng, work)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
