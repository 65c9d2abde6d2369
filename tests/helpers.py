"""Helpers the tests share (imported as `from .helpers import ...`; fixtures live in conftest.py): tiny runs
(vit-nano/4 at 16px), the `vitx` command in-process (`vitx_cli`) or, where the process itself is under test (the
console script, kill -9, multi-process launches), in a subprocess (`run_vitx`), the one reader of metrics.jsonl,
and the accuracy of a saved transfer recomputed from its files."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A run small enough for a test: 0.2M-parameter backbone, 16px, a few steps; no curves.png (the session runs
# below draw theirs, and tests/test_curves.py reads them).
TINY = {"model": "vit-nano/4", "data": "embedded:shapes", "batch_size": 16, "steps": 6, "warmup_steps": 2,
        "save_every": 3, "log_every": 1, "eval_samples": 32, "workers": 0, "log_with": "none", "curves": False}


def tiny(tmp_path: Path, **changes) -> dict:
    return {**TINY, "output_dir": str(tmp_path / "run"), **changes}


def resumed_copy(run: Path, tmp_path: Path, options: dict, dropped: tuple[int, ...]) -> Path:
    """A copy of the tiny run `run` (made with `options`) whose checkpoints at steps `dropped` are deleted, resumed
    to its end in this process: what it saves must equal the uninterrupted run's."""
    import shutil

    from vitx.runner import pretrain

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for step in dropped:
        shutil.rmtree(copy / "checkpoints" / f"step_{step:08d}")
    pretrain(tiny(tmp_path, **options), resume=True)
    return copy


def as_flags(options: dict) -> list[str]:
    """Turn a config dict into `vitx pretrain` flags (the settings' own rule: `vitx.settings.as_flags`)."""
    from vitx.runner.config import PretrainConfig
    from vitx.settings import as_flags as settings_flags

    return settings_flags(options, PretrainConfig)


@dataclass
class CliResult:
    """What a command left: its exit status and what it printed (as `subprocess.CompletedProcess` has them)."""

    returncode: int
    stdout: str
    stderr: str


def vitx_cli(*args: str, cwd: Path | str | None = None) -> CliResult:
    """`vitx ARGS` in this process, through the console script's own entry function (`vitx.cli.main`), with
    its output captured: the same code path as the command, without five seconds of imports per call.
    Components and plugins a command registers (`--plugin FILE`) are undone afterwards."""
    from vitx import discovery as plugins, registry
    from vitx.cli import main

    out, err = io.StringIO(), io.StringIO()
    before = set(plugins.origins)
    here, code = os.getcwd(), 0
    try:
        with registry.temporary(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            os.chdir(cwd or ROOT)
            main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(here)
        for name in set(plugins.origins) - before:  # --plugin files and modules; entry points stay loaded
            if not plugins.origins[name].startswith("entry point"):
                for table in (plugins.loaded, plugins.failed, plugins.origins):
                    table.pop(name, None)
    return CliResult(code, out.getvalue(), err.getvalue())


def run_vitx(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """`python -m vitx ARGS` in a new process: for tests of the process itself."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    return subprocess.run([sys.executable, "-m", "vitx", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=kw.pop("cwd", ROOT), env=env, **kw)


def metrics(run: Path) -> list[dict]:
    """A run's metrics.jsonl, one dict per logged step, as vitx reads it back (a non-finite figure NaN again); every
    line must be strict JSON (no NaN or Infinity: what jq and pandas parse)."""
    from vitx.plots.series import read_metrics

    path = Path(run) / "metrics.jsonl"
    for line in path.read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in metrics.jsonl: not strict JSON"))
    return read_metrics(path)


def saved_model_accuracy(final: Path, task: str, limit: int, data_dir: str | None = None, seed: int = 0) -> float:
    """Test top-1 of a transfer's saved final model, recomputed here from its files alone (the safetensors
    backbone and head, the preprocessing in config.json) on the task's `limit` test images as `--test-samples
    limit --seed seed` draws them (`vitx.data.draws.test_rows`): what a user reloading the model measures,
    independent of the runner's evaluation loop."""
    import torch

    from vitx.safe_io import read_config, read_weights
    from vitx.runs import load_backbone
    from vitx.data import decode
    from vitx.data.draws import test_rows
    from vitx.data.transforms import Preprocess
    from vitx.tasks import get_task, open_full_splits

    backbone = load_backbone(final).eval()
    head = read_weights(Path(final) / "heads.safetensors")
    preprocess = Preprocess.from_dict(read_config(final)["preprocess"])
    _, test, _ = open_full_splits(get_task(task), data_dir)
    rows = test_rows(test, limit, seed)
    images, labels = zip(*(test.load(int(i)) for i in (range(len(test)) if rows is None else rows)))
    with torch.no_grad():
        x = preprocess.normalise(torch.stack([preprocess.eval(decode(img)) for img in images]))  # (N, 3, S, S)
        logits = backbone(x) @ head["head.weight"].T + head["head.bias"]  # (N, K)
    return float((logits.argmax(-1) == torch.tensor(labels)).float().mean())


def write_image_folder(root: Path, corrupt: bool = False) -> Path:
    """Two classes (red, blue) of four 20x20 PNGs in class folders; `corrupt` adds an undecodable one."""
    from PIL import Image

    for label, colour in (("red", (220, 20, 20)), ("blue", (20, 20, 220))):
        (root / label).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (20, 20), colour).save(root / label / f"{i}.png")
    if corrupt:
        (root / "red" / "broken.png").write_bytes(b"\x89PNG not really")
    return root


# The session runs' settings (conftest.py trains them; tests compare against them)
MPP_OVERRIDES = {"steps": 60, "batch_size": 64, "warmup_steps": 6, "log_every": 10, "monitor_every": 30}
TRANSFER = dict(task="vtab/dsprites_loc", shots=40, batch_size=8, lrs=[0.003, 0.03], sweep_steps=[2, 4],
                test_samples=64, workers=0, save_every=2, log_every=1, curves=False)
