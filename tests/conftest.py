"""Fixtures: the trained runs that many tests read, made once per session, and the offline environment every
test runs in. Shared helpers are in helpers.py."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterator

import pytest

# Tests never reach a hub, as in CI. huggingface_hub reads these once, at import, so set them before anything
# imports it.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
# The suite runs on pytest-xdist's workers, one per core up to 4 (`pytest_xdist_auto_num_workers`): each worker,
# and every process a test starts, computes with one thread, so that the workers never oversubscribe the cores
# (set before torch is imported: its thread pool reads it once).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

from .helpers import MPP_OVERRIDES, TINY, TRANSFER, vitx_cli  # noqa: E402

WORKERS = 4  # at most: beyond that the session fixtures, trained once per worker, cost more than they save


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: one worker per core this process may use, at most WORKERS."""
    return max(1, min(WORKERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))

# Trained once per session, read by many tests. Each is a real run of the code under test; the tests that read
# it check different things on it (learning, checkpoint layout, transfer, inspection, recipes).

@contextlib.contextmanager
def shared(tmp_path_factory, name: str, leaf: str = "run") -> Iterator[tuple[Path, bool]]:
    """A session fixture's folder, made by the first of the session's workers (pytest-xdist) that asks for it and
    read by the others: (its path, whether it is made already). Without workers: a folder of this session."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"shared-{name}"
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root) + ".lock"):
        made = (root / "made").exists()
        yield root / leaf, made
        (root / "made").touch()  # only once the body ran through: a failed make is made again by the next


@pytest.fixture(scope="session")
def pretrained_run(tmp_path_factory) -> Path:
    """A vit-nano/4 pre-trained for 150 supervised steps on the embedded digits' train split at 16px, with 360
    validation images at the end (~8 s; the tiny shapes demo needs ~1,000 steps to leave its plateau)."""
    from vitx.runner import pretrain

    with shared(tmp_path_factory, "pretrained") as (out, made):
        if not made:
            from vitx.pages import write_run_page  # (the page `vitx pretrain` has the run write)

            pretrain({**TINY, "data": "embedded:digits", "output_dir": str(out), "steps": 150, "batch_size": 64,
                      "warmup_steps": 10, "save_every": 150, "log_every": 10, "eval_samples": 360, "curves": True},
                     page=write_run_page)
    return out




@pytest.fixture(scope="session")
def mpp_run(tmp_path_factory) -> Path:
    """The CPU MPP recipe (`recipes/cpu/pretrain-mpp.toml`, vit-nano/4 on the digits at 32px, monitored on
    digits), shortened to 60 steps of 64 with `--set`, run through the command as a user types it."""
    with shared(tmp_path_factory, "mpp") as (out, made):
        if not made:
            sets = [a for k, v in MPP_OVERRIDES.items() for a in ("--set", f"{k}={v}")]
            proc = vitx_cli("pretrain", "--recipe", "recipes/cpu/pretrain-mpp.toml", *sets, "--workers", "1",
                            "--log-with", "none", "--output-dir", str(out))
            assert proc.returncode == 0, proc.stderr[-2000:]
    return out




@pytest.fixture(scope="session")
def transfer_run(tmp_path_factory, pretrained_run) -> tuple[Path, dict]:
    """The VTAB protocol (a 2 lr × 2 steps sweep, retrain, test) from `pretrained_run` to dSprites location at
    32px (position embeddings interpolated 4×4 → 8×8), with its figures: its output directory and the returned
    results."""
    from vitx.transfer import TransferConfig, transfer

    with shared(tmp_path_factory, "transfer", "t") as (out, made):
        returned = out.parent / "returned.json"
        if not made:
            cfg = TransferConfig(start=str(pretrained_run), image_size=32, output_dir=str(out),
                                 **{**TRANSFER, "curves": True})
            from vitx.pages import write_transfer_page  # (the page `vitx transfer` has it write)

            returned.write_text(json.dumps(transfer(cfg, page=write_transfer_page)))
    return out, json.loads(returned.read_text())
