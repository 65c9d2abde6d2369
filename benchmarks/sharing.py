"""Processes sharing a machine's cores (not a test): vitx runs alone and several at once, with torch's threads as
vitx now chooses them (runner/threads.py: the granted cores less the busy loader workers, OpenMP spinning
briefly) against torch's own default (one thread per core, which `OMP_NUM_THREADS=<cores>` reproduces, and GNU
OpenMP's default spin: what vitx did before).

    python benchmarks/sharing.py [--copies 4] [--steps 300] [--only main,transfer,dino] [--after-only]

  main      the README's main job (`vitx pretrain`, its defaults) cut to --steps: one alone, then --copies at
            once; the figure is wall time at once ÷ (copies × alone): 1.0 is a fair share, above it the
            processes harm each other (issue 50 measured 2.0 with torch's default threads)
  transfer  a 50-shot transfer (`vitx transfer --task embedded/digits --shots 50`, 200 steps, no sweep) from the
            main job's run: one alone, then --copies at once, started as separate commands
  dino      the CPU DINO recipe (recipes/cpu/pretrain-dino.toml) alone for 60 steps: img/s over its last 40
Every run is a separate `python -m vitx` process; each job runs before, then after (one pass: the machine's
drift is not averaged out, so repeat a figure that matters); --after-only runs vitx's rule alone (a check of the
acceptance figures in a third of the time: the "before" side's copies are the slowest runs).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# before: torch's default threads and GNU OpenMP's default spin before a thread sleeps (300,000, given explicitly
# so that vitx does not set its own); after: what vitx now sets
SIDES = {"before (torch's default)": {"OMP_NUM_THREADS": str(os.cpu_count() or 2), "GOMP_SPINCOUNT": "300000"},
         "after (vitx's rule)": {}}


def env(side: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return {**base, **side, "PYTHONUNBUFFERED": "1"}


def run_at_once(commands: list[list[str]], side: dict[str, str]) -> float:
    """Wall seconds until every command has finished, all started together."""
    logs = [tempfile.TemporaryFile() for _ in commands]  # (a pipe left unread could stall a process)
    start = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=ROOT, env=env(side), stdout=subprocess.DEVNULL, stderr=log)
             for c, log in zip(commands, logs)]
    for p in procs:
        p.wait()
    took = time.perf_counter() - start
    for p, c, log in zip(procs, commands, logs):
        if p.returncode != 0:
            log.seek(0)
            sys.exit(f"{' '.join(c)} failed ({p.returncode}): {log.read().decode()[-2000:]}")
    return took


def vitx(*args: str) -> list[str]:
    return [sys.executable, "-m", "vitx", *args]


def main_job(out: Path, steps: int) -> list[str]:
    return vitx("pretrain", "--steps", str(steps), "--output-dir", str(out), "--no-curves", "--log-with", "none")


def transfer_job(start: Path, out: Path) -> list[str]:
    return vitx("transfer", "--from", str(start), "--task", "embedded/digits", "--shots", "50", "--no-sweep",
                "--lr", "0.1", "--steps", "200", "--output-dir", str(out), "--no-curves")


def measure(name: str, make: callable, copies: int, tmp: Path, sides: dict[str, dict[str, str]]) -> None:
    """One alone, then `copies` at once, on each side; a table row each."""
    for label, side in sides.items():
        alone = run_at_once([make(tmp / f"{name}-{len(label)}-alone")], side)
        together = run_at_once([make(tmp / f"{name}-{len(label)}-{i}") for i in range(copies)], side)
        print(f"| {name} | {label} | {alone:.1f} s | {copies} at once: {together:.1f} s | "
              f"{together / (copies * alone):.2f} |", flush=True)


# the DINO recipe's sides: torch's default and vitx's rule with the recipe's `threads = 2` set back to 0 (the
# rule; OMP_NUM_THREADS then counts), and the recipe as it is
DINO_SIDES = {label: (side, ["--threads", "0"]) for label, side in SIDES.items()} | {
    "the recipe (threads = 2)": ({}, [])}


def dino_rate(tmp: Path, side: dict[str, str], label: str, extra: list[str]) -> float:
    out = tmp / f"dino-{len(label)}"
    run_at_once([vitx("pretrain", "--recipe", str(ROOT / "recipes/cpu/pretrain-dino.toml"), "--steps", "60",
                      "--log-every", "20", "--save-every", "60", "--output-dir", str(out), "--no-curves",
                      "--log-with", "none", "--monitor", "", "--eval-samples", "0", *extra)], side)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["images_per_s"] for r in rows if "images_per_s" in r and r["step"] > 20]
    return sum(rates) / len(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--only", default="main,transfer,dino")
    ap.add_argument("--after-only", action="store_true", help="vitx's rule only (not torch's default before it)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    sides, dino_sides = ({k: v for k, v in table.items() if not (args.after_only and k.startswith("before"))}
                         for table in (SIDES, DINO_SIDES))
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}", flush=True)
    print("| job | threads | one alone | several at once | at once ÷ (copies × alone) |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if "main" in only or "transfer" in only:
            start = tmp / "start"
            run_at_once([main_job(start, args.steps)], {})
        if "main" in only:
            measure("main job", lambda out: main_job(out, args.steps), args.copies, tmp, sides)
        if "transfer" in only:
            measure("transfer", lambda out: transfer_job(start, out), args.copies, tmp, sides)
        if "dino" in only:
            for label, (side, extra) in dino_sides.items():
                rate = dino_rate(tmp, side, label, extra)
                print(f"| CPU DINO recipe | {label} | {rate:.1f} img/s (steps 21-60) | | |", flush=True)


if __name__ == "__main__":
    main()
