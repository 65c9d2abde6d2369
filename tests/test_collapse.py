"""The collapse watch (evaluation/collapse.py, the runner's `watch_step`): a representation collapse said once as
a warning that --stop-on-collapse acts on; an objective's tired head said as a calmer note, a collapse only when
the features stall with it; a healthy run not flagged. The figures replayed here are measured runs
(docs/collapse.md)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from vitx.evaluation.collapse import (RANK_FLOOR, WINDOW, Watch, chance_bound, label_free)
from vitx.objectives.base import HeadFinding

from .helpers import as_flags, metrics, tiny, vitx_cli

# A one-file objective that maps every image to one point (the ones vector): the collapse the watch must see.
ONE_POINT = '''
import vitx


@vitx.register_objective("one-point", description="maps every image to one point (a collapse)")
class OnePoint(vitx.Objective):
    def forward(self, batch):
        z = self.backbone(batch["image"])  # (B, D)
        return {"loss": (z - 1.0).pow(2).mean()}
'''
WATCHED = dict(steps=20, watch_every=5, log_every=5, save_every=100, lr=1e-2, warmup_steps=0, batch_size=32)
DIGITS = chance_bound([i % 10 for i in range(360)])  # the digits' 360 test images: chance 10%, bound 14.7%


def uniform(m: dict[str, float]) -> list[HeadFinding]:
    """DINO's uniform-head rule as its plugin declares it (K = 1,024: log K = 6.931)."""
    h = m.get("teacher_entropy")
    if h is None or h < 0.98 * math.log(1024) or m.get("teacher_student_kl", 0) > 0.1:
        return []
    return [HeadFinding("teacher_entropy", h, 0.98 * math.log(1024), "uniform", f"uniform ({h:.3f})",
                        "a lower teacher_temp")]


def test_label_free_figures_of_spread_and_collapsed_features():
    rng = np.random.default_rng(0)
    spread = label_free(rng.normal(size=(256, 64)))
    assert spread["rankme"] > 50 and spread["feature_std"] == pytest.approx(1 / 8, rel=0.05)
    point = label_free(np.ones((256, 64)) + 1e-6 * rng.normal(size=(256, 64)))
    assert point["rankme"] < RANK_FLOOR and point["feature_std"] < 1e-5
    watch = Watch()
    watch.observe(0, spread)
    assert watch.observe(5, point) == []  # once: a dip, not yet a collapse
    found = watch.observe(10, point)
    assert [f.kind for f in found] == ["collapse"] and "effective rank (RankMe) is 1.00" in found[0].line()
    assert watch.observe(15, point) == []  # said once
    line = Watch()  # one direction with a scale per image is rank 1
    line.observe(0, spread)
    rank1 = label_free(rng.normal(size=(256, 1)) * np.ones((1, 64)))
    assert line.observe(5, rank1) == [] and line.observe(10, rank1)[0].record()["figure"] == "rankme"


def test_a_representation_contracted_far_below_its_start_or_at_chance_is_a_collapse():
    # measured: tests' one-point objective (shapes, 16px) at steps 0, 5, 10; MAE's patch-mean dip on the digits
    start = {"rankme": 27.93, "feature_std": 0.105}
    watch = Watch()
    watch.observe(0, start)
    assert watch.observe(5, {"rankme": 6.45, "feature_std": 0.0209}) == []  # 23% and 20% of the start
    found = watch.observe(10, {"rankme": 2.22, "feature_std": 0.0050})[0]
    assert found.kind == "collapse" and "8% and 5% of their values at step 0" in found.line()
    mae = Watch()
    mae.observe(0, {"rankme": 2.99, "feature_std": 0.0139})  # its deepest dip: 40% of the rank, 13% of the spread
    assert all(mae.observe(s, {"rankme": 1.19, "feature_std": 0.0018}) == [] for s in (50, 100, 150))
    # the monitor at chance: 10 digit classes, 360 test images (bound 10% + 3 s.e. = 14.7%)
    assert DIGITS == (0.1, pytest.approx(0.1 + 3 * math.sqrt(0.09 / 360)))
    knn = Watch(chance={"monitor_": DIGITS})
    knn.observe(0, {"monitor_knn": 0.58, "monitor_fewshot_10shot": 0.38, "teacher_monitor_knn": 0.58})
    assert knn.observe(40, {"monitor_knn": 0.12, "monitor_fewshot_10shot": 0.16}) == []  # 10-shot: above chance
    knn.observe(80, {"monitor_knn": 0.11, "monitor_fewshot_10shot": 0.12})
    said = knn.observe(120, {"monitor_knn": 0.10, "monitor_fewshot_10shot": 0.11})[0].record()
    assert said["kind"] == "collapse" and said["figure"] == "monitor_best" and said["value"] == 0.11


def test_a_tired_head_is_a_note_while_the_features_learn_and_a_collapse_once_they_stall():
    # the CPU plan's DINO (recipes/reproduction/DINO.md, 1,000 steps): the head uniform from step 200, RankMe
    # doubling; it transferred 18 points above scratch
    healthy = [(0, None, None, 4.64), (100, 6.516, 0.265, 3.27), (200, 6.865, 0.057, 5.27), (300, 6.899, 0.029, 7.18),
               (500, 6.909, 0.020, 8.87), (700, 6.910, 0.019, 9.43), (1000, 6.909, 0.019, 9.89)]
    watch = Watch(uniform)
    said = [f for step, h, kl, rank in healthy for f in watch.observe(step, {
        "rankme": rank, **({"teacher_entropy": h, "teacher_student_kl": kl} if h else {})})]
    assert [(f.kind, f.step) for f in said] == [("head", 300)]  # the second log step in a row at ≥ 0.98 log K
    assert said[0].line() == ("head at step 300: uniform (6.899); not a collapse unless the features stall too (RankMe "
                              "7.18, 4.64 at step 0); to change it: a lower teacher_temp")
    assert said[0].record()["kind"] == "head" and watch.found is None
    # the same head while RankMe stays below its start and stops rising over WINDOW watches: a collapse
    stalled = Watch(uniform)
    stalled.observe(0, {"rankme": 4.64})
    ranks = [6.0, 6.5, 5.0, 4.6, 4.5]  # up, then back below the start
    found = [f for i, r in enumerate(ranks) for f in stalled.observe(10 * (i + 1), {
        "teacher_entropy": 6.92, "teacher_student_kl": 0.01, "rankme": r})]
    assert [(f.kind, f.step) for f in found] == [("head", 20), ("collapse", 10 * (WINDOW + 1))]
    collapse = found[1].record()
    assert collapse["figure"] == "rankme" and collapse["head"]["state"] == "uniform"
    assert collapse["line"] == ("collapse at step 40: uniform (6.920), and the features stopped improving (RankMe "
                                "4.60: no higher than at step 0 (4.64) nor 3 watches before (6.00)); a lower "
                                "teacher_temp; --stop-on-collapse stops the run here with a checkpoint")


def test_the_monitor_above_its_start_says_the_features_learn_whatever_rankme_says():
    # SimCLR (docs/collapse.md), every 25 steps: RankMe below its start while the kNN rises from 58.1% to 88.3%;
    # given a tired head, RankMe alone would call it stalled from step 75
    simclr = [(0, 4.635, 0.5806), (25, 3.322, None), (50, 2.605, 0.75), (75, 3.561, None), (100, 3.799, 0.8389),
              (125, 4.015, None), (150, 3.814, 0.8833), (175, 4.759, None), (200, 4.4, 0.875)]
    head = {"teacher_entropy": 6.92, "teacher_student_kl": 0.01}
    cases = [(0.5806, 0, [("head", 50, "teacher_entropy")]),  # as measured: the monitor says they learn
             (0.95, 0, [("head", 50, "teacher_entropy"), ("collapse", 75, "rankme")]),  # it agrees with RankMe
             (0.95, 3, [("head", 50, "teacher_entropy"), ("collapse", 150, "monitor_best")])]  # it overrules it
    for knn0, lift, said in cases:
        watch = Watch(uniform, {"monitor_": DIGITS})
        found = [f for step, rank, knn in simclr for f in watch.observe(step, {
            "rankme": rank + (lift if step else 0), **({"monitor_knn": knn0 if step == 0 else knn} if knn else {}),
            **(head if step else {})})]
        assert [(f.kind, f.step, f.record()["figure"]) for f in found] == said
    assert "(the monitor's best accuracy 88.3%, no higher than at step 0 (95.0%) at its last 3 readings)" in found[-1].line()


def test_a_resumed_watch_keeps_its_baselines_and_says_nothing_twice():
    rows = [{"step": 0, "rankme": 4.64}, {"step": 10, "teacher_entropy": 6.92, "rankme": 4.0},
            {"step": 20, "teacher_entropy": 6.92, "rankme": 5.0, "watch": [{"kind": "head"}]}]
    watch = Watch(uniform)
    watch.replay(rows)
    assert watch.start["rankme"] == 4.64 and watch.ranks == [4.64, 4.0, 5.0] and watch.said_heads == {"uniform"}
    assert watch.observe(30, {"teacher_entropy": 6.92, "rankme": 6.0}) == []


@pytest.fixture(scope="module")
def one_point(tmp_path_factory):
    plugin = tmp_path_factory.mktemp("collapse") / "one_point.py"
    plugin.write_text(ONE_POINT)
    return plugin


def test_an_objective_that_maps_every_image_to_one_point_is_said_a_collapse_within_two_watches(one_point, tmp_path):
    res = vitx_cli("pretrain", "--plugin", str(one_point), *as_flags(tiny(tmp_path, objective="one-point", **WATCHED)),
                   "--log-format", "lines")
    assert res.returncode == 0, res.stderr
    warned = [line for line in res.stdout.splitlines() if "collapse at step" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: collapse at step 10: "), res.stdout
    rows = metrics(tmp_path / "run")
    assert [r["step"] for r in rows if "rankme" in r] == list(range(0, 21, 5))
    said = [(r["step"], e) for r in rows for e in r.get("watch", [])]
    assert len(said) == 1 and said[0][0] == 10 and said[0][1]["kind"] == "collapse"
    start, at = rows[0], next(r for r in rows if r["step"] == 10)
    assert start["rankme"] > 20 and at["rankme"] <= 0.25 * start["rankme"]  # spread out at step 0, contracted at 10
    page = (tmp_path / "run" / "report.html").read_text()  # the run's page says the watch's line as it was logged
    assert "<strong>Collapse at step 10</strong>" in page and "No collapse seen" not in page


def test_stop_on_collapse_checkpoints_and_exits_3_and_needs_a_watch(one_point, tmp_path):
    flags = as_flags(tiny(tmp_path, objective="one-point", **WATCHED))
    res = vitx_cli("pretrain", "--plugin", str(one_point), *flags, "--stop-on-collapse")
    assert res.returncode == 3, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "--stop-on-collapse: collapse at step 10: the features contracted" in line and "checkpoint" in line
    said = next(r for r in metrics(tmp_path / "run") if "watch" in r)
    state = json.loads((tmp_path / "run" / "checkpoints" / f"step_{said['step']:08d}" / "trainer_state.json").read_text())
    assert state["step"] == said["step"] == 10  # stopped where it was seen, with a checkpoint there
    # resumed (the run keeps its --stop-on-collapse): the watch replays metrics.jsonl, its step-0 baselines with it
    # (the relative rule needs them), and, the features still contracted, says the collapse again and stops
    res = vitx_cli("pretrain", "--plugin", str(one_point), *flags, "--resume")
    assert res.returncode == 3 and "collapse at step 15: the features contracted" in res.stderr, res.stderr
    lines = [(r["step"], e["line"]) for r in metrics(tmp_path / "run") for e in r.get("watch", [])]
    assert [step for step, _ in lines] == [10, 15] and "of their values at step 0 (27.93" in lines[1][1]
    for off in (["--watch-every", "0"], ["--watch-every", "50"]):  # nothing watched: one line, before any step
        res = vitx_cli("pretrain", "--plugin", str(one_point), *flags, "--stop-on-collapse", *off, "--output-dir",
                       str(tmp_path / "off"))
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and "nothing is watched" in res.stderr
    assert not (tmp_path / "off").exists()


def test_a_healthy_supervised_run_is_not_flagged_and_the_watch_changes_nothing_it_computes(pretrained_run, tmp_path):
    from safetensors.torch import load_file

    from vitx.runner import pretrain

    rows = metrics(pretrained_run)  # 150 supervised steps, watched at steps 0 and 100
    assert [r["step"] for r in rows if "rankme" in r] == [0, 100] and not any("watch" in r for r in rows)
    assert rows[0]["rankme"] > 2 * RANK_FLOOR
    healthy = {**WATCHED, "lr": 2e-3, "steps": 10}
    pretrain(tiny(tmp_path, **healthy))
    pretrain(tiny(tmp_path / "off", **{**healthy, "watch_every": 0}))
    watched, unwatched = load_file(tmp_path / "run" / "model.safetensors"), load_file(tmp_path / "off" / "run" / "model.safetensors")
    assert all(torch.equal(watched[k], unwatched[k]) for k in watched)  # no draw of the run's is touched
    assert not any("rankme" in r for r in metrics(tmp_path / "off" / "run"))
    assert len([r for r in metrics(tmp_path / "run") if "rankme" in r]) == 3
