"""Shared helpers: tiny runs (vit-nano/4 at 16px) and running the real `vitx` command in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Tests never reach a hub, as in CI. huggingface_hub reads these once, at import, so set them before anything
# imports it.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

ROOT = Path(__file__).resolve().parents[1]

# A run small enough for a test: 0.2M-parameter backbone, 16px, a few steps.
TINY = {"model": "vit-nano/4", "data": "embedded:shapes", "batch_size": 16, "steps": 6, "warmup_steps": 2,
        "save_every": 3, "log_every": 1, "eval_samples": 32, "workers": 0, "log_with": "none"}


def tiny(tmp_path: Path, **changes) -> dict:
    return {**TINY, "output_dir": str(tmp_path / "run"), **changes}


def as_flags(options: dict) -> list[str]:
    """Turn a config dict into `vitx pretrain` flags."""
    flags = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            flags += [flag, str(value)]
    return flags


def run_vitx(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    return subprocess.run([sys.executable, "-m", "vitx", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=kw.pop("cwd", ROOT), env=env, **kw)


@pytest.fixture(scope="session")
def pretrained_run(tmp_path_factory) -> Path:
    """A vit-nano/4 pre-trained for 150 supervised steps on the embedded digits' train split at 16px (~6 s; the
    tiny shapes demo needs ~1,000 steps to leave its plateau), shared by the transfer tests."""
    from vitx.runner import pretrain

    out = tmp_path_factory.mktemp("pretrained") / "run"
    pretrain({**TINY, "data": "embedded:digits", "output_dir": str(out), "steps": 150, "batch_size": 64, "warmup_steps": 10, "save_every": 150,
              "log_every": 50, "eval_samples": 0})
    return out
