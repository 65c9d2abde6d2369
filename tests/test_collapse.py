"""The collapse watch (evaluation/collapse.py, the runner's `watch`): label-free figures that tell a collapse, said
once in one line; --stop-on-collapse stops with a checkpoint and exit 3; a healthy run is not flagged."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from vitx.evaluation.collapse import LABEL_FREE_KEYS, RANK_FLOOR, SPREAD_FLOOR, Watch, label_free, representation_collapse

from .helpers import metrics, tiny, vitx_cli

# A one-file objective that pulls every image's features to the batch mean: the collapse the watch must see.
TO_MEAN = '''
import torch
import vitx


@vitx.register_objective("to-mean", description="pulls every image's features to the batch mean (a collapse)")
class ToMean(vitx.Objective):
    features = "cls-token"

    def forward(self, batch):
        z = self.backbone(batch["image"])  # (B, D)
        loss = (z - z.mean(0, keepdim=True).detach()).pow(2).sum(1).mean()
        return {"loss": loss}
'''
WATCHED = dict(steps=20, watch_every=5, log_every=5, save_every=100, lr=1e-2, warmup_steps=0, batch_size=32)


def test_label_free_figures_of_spread_and_collapsed_features():
    rng = np.random.default_rng(0)
    spread = label_free(rng.normal(size=(256, 64)))
    assert spread["rankme"] > 50 and spread["feature_std"] == pytest.approx(1 / 8, rel=0.05)
    assert representation_collapse(spread) is None
    point = label_free(np.ones((256, 64)) + 1e-6 * rng.normal(size=(256, 64)))
    assert point["rankme"] < RANK_FLOOR and point["feature_std"] < 1e-5
    assert "effective rank" in representation_collapse(point)
    # a spread-out direction is not a collapse; one direction with a scale per image is (rank 1)
    line = label_free(rng.normal(size=(256, 1)) * np.ones((1, 64)))
    assert "effective rank" in representation_collapse(line)


def test_the_watch_says_a_collapse_once_when_two_observations_in_a_row_show_it():
    teacher = (lambda m: "teacher uniform" if m.get("h", 0) > 1 else None, None)
    watch = Watch([(representation_collapse, LABEL_FREE_KEYS), teacher])
    assert watch.observe(10, {"rankme": 12.0}) is None
    assert watch.observe(15, {"rankme": 1.0}) is None  # once: a dip, not yet a collapse
    assert watch.observe(20, {"rankme": 12.0, "h": 2.0}) is None  # it recovered; the teacher: once
    assert watch.observe(25, {"h": 2.0}) is not None  # twice in a row (the rank is not measured here)
    found = watch.found
    assert found.step == 25 and found.said == "teacher uniform"
    assert found.line().startswith("collapse at step 25: teacher uniform; ") and "--stop-on-collapse" in found.line()
    assert watch.observe(30, {"rankme": 1.0}) is None and watch.observe(35, {"rankme": 1.0}) is None
    assert watch.found is found  # said once


@pytest.fixture(scope="module")
def to_mean(tmp_path_factory):
    root = tmp_path_factory.mktemp("collapse")
    plugin = root / "to_mean.py"
    plugin.write_text(TO_MEAN)
    return plugin


def test_an_objective_that_pulls_features_to_the_batch_mean_is_warned_once(to_mean, tmp_path):
    from .helpers import as_flags

    res = vitx_cli("pretrain", "--plugin", str(to_mean), *as_flags(tiny(tmp_path, objective="to-mean", **WATCHED)),
                   "--log-format", "lines")
    assert res.returncode == 0, res.stderr
    warned = [line for line in res.stdout.splitlines() if "collapse at step" in line]
    assert len(warned) == 1 and "--stop-on-collapse" in warned[0], res.stdout
    rows = metrics(tmp_path / "run")
    watched = [r for r in rows if "rankme" in r]
    assert [r["step"] for r in watched] == list(range(0, 21, 5))
    said = [r for r in rows if "collapse" in r]
    assert len(said) == 1 and said[0]["step"] <= 20  # within the first watch steps
    assert watched[0]["rankme"] > 2 * RANK_FLOOR  # it started spread out
    at = next(r for r in watched if r["step"] == said[0]["step"])
    assert at["rankme"] <= RANK_FLOOR or at["feature_std"] <= SPREAD_FLOOR / math.sqrt(64)


def test_stop_on_collapse_checkpoints_and_exits_3(to_mean, tmp_path):
    from .helpers import as_flags

    res = vitx_cli("pretrain", "--plugin", str(to_mean), *as_flags(tiny(tmp_path, objective="to-mean", **WATCHED)),
                   "--stop-on-collapse")
    assert res.returncode == 3, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "--stop-on-collapse: collapse at step" in line and "checkpoint" in line
    said = next(r for r in metrics(tmp_path / "run") if "collapse" in r)
    state = json.loads((tmp_path / "run" / "checkpoints" / f"step_{said['step']:08d}" / "trainer_state.json").read_text())
    assert state["step"] == said["step"]  # stopped where it was seen, with a checkpoint there


def test_a_healthy_supervised_run_is_not_flagged_and_the_watch_changes_nothing_it_computes(tmp_path):
    from safetensors.torch import load_file

    from vitx.runner import pretrain

    healthy = {**WATCHED, "lr": 2e-3, "steps": 10}
    pretrain(tiny(tmp_path, **healthy))
    pretrain(tiny(tmp_path / "off", **{**healthy, "watch_every": 0}))
    watched, unwatched = load_file(tmp_path / "run" / "model.safetensors"), load_file(tmp_path / "off" / "run" / "model.safetensors")
    assert all(torch.equal(watched[k], unwatched[k]) for k in watched)  # no draw of the run's is touched
    assert not any("rankme" in r for r in metrics(tmp_path / "off" / "run"))
    rows = metrics(tmp_path / "run")
    assert len([r for r in rows if "rankme" in r]) == 3
    assert not any("collapse" in r for r in rows)
    assert min(r["rankme"] for r in rows if "rankme" in r) > 2 * RANK_FLOOR
