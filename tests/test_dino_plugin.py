"""The DINO plugin (plugins/vitx-dino): multi-crop views from the loader, an EMA teacher that is never optimised,
saved, resumed bit for bit and exported on request, iBOT and KoLeo options, and one-line errors."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import vitx
from vitx.registry import OBJECTIVES

from .helpers import metrics, resumed_copy, tiny, vitx_cli

SPEC = "dino(out_dim=64,hidden_dim=32,bottleneck_dim=16,local_crops=2,momentum=0.9,ibot=0.5,koleo=0.1," \
       "warmup_teacher_temp=0.02,warmup_teacher_temp_steps=4)"
OPTIONS = dict(objective=SPEC, save_every=1, keep_checkpoints=6, monitor="embedded:digits(length=200, eval_length=50)")


@pytest.fixture(scope="module")
def dino_run(tmp_path_factory):
    """6 DINO steps (2 global + 2 local crops, iBOT and KoLeo on), a checkpoint after each (all kept), monitored."""
    from vitx.runner import pretrain

    root = tmp_path_factory.mktemp("dino")
    pretrain(tiny(root, **OPTIONS))
    return root / "run"


def dino(**options):
    torch.manual_seed(0)
    return vitx.create_objective("dino", vitx.create_backbone("vit-nano/4"), None, **options)


def test_discovered_through_its_entry_point():
    assert OBJECTIVES.get("dino").source == "entry point dino (vitx-dino)"


def test_views_are_dinos_global_and_local_crops():
    views = dino(local_crops=6).views()
    assert [(v.count, v.size, v.scale) for v in views] == [(1, 16, (0.4, 1.0)), (1, 16, (0.4, 1.0)),
                                                           (6, 8, (0.05, 0.4))]
    assert [(v.blur, v.solarize) for v in views] == [(1.0, 0.0), (0.1, 0.2), (0.5, 0.0)]
    assert all(v.jitter == (0.4, 0.4, 0.2, 0.1) and v.gray == 0.2 for v in views)


def test_the_run_records_its_views_and_trains_only_the_student(dino_run):
    config = json.loads((dino_run / "config.json").read_text())
    assert [v["size"] for v in config["views"]] == [16, 16, 8] and config["views"][2]["count"] == 2
    assert config["features"] == "backbone"
    obj = dino(**dict(out_dim=64, hidden_dim=32, bottleneck_dim=16, ibot=0.5))
    trained = {n for n, p in obj.named_parameters() if p.requires_grad}
    assert trained and not any(n.startswith("teacher.") for n in trained)
    assert all(not p.requires_grad for p in obj.teacher.parameters())
    assert "mask_token" in trained


def test_the_teacher_is_the_students_moving_average_on_a_cosine_momentum(dino_run):
    """Replayed from the student's saved weights at every step: t₀ = the initial student, then
    tₛ = m(s−1)·tₛ₋₁ + (1 − m(s−1))·sₛ with m(k) = 1 − (1 − 0.9)·(cos(πk / 5) + 1) / 2."""
    import math

    students = [load_file(dino_run / "checkpoints" / f"step_{t:08d}" / "model.safetensors") for t in range(1, 7)]
    teachers = [load_file(dino_run / "checkpoints" / f"step_{t:08d}" / "teacher.safetensors") for t in range(1, 7)]
    for step in range(2, 7):
        m = 1 - 0.1 * (math.cos(math.pi * (step - 1) / 5) + 1) / 2
        for k, t in teachers[step - 1].items():
            expected = teachers[step - 2][k] * m + students[step - 1][k] * (1 - m)
            torch.testing.assert_close(t, expected, rtol=0, atol=2e-6)
    last = teachers[-1]
    assert any(not torch.equal(last[k], students[-1][k]) for k in last)  # it lags the student
    heads = load_file(dino_run / "heads.safetensors")
    assert any(k.startswith("teacher.head.") for k in heads) and "criterion.center" in heads
    assert not any(k.startswith("teacher") for k in load_file(dino_run / "model.safetensors"))


def test_schedules_and_losses_are_logged_and_the_monitor_reads_teacher_and_student(dino_run):
    rows = [r for r in metrics(dino_run) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [round(r["teacher_temp"], 4) for r in rows] == [0.02, 0.025, 0.03, 0.035, 0.04, 0.04]  # warm-up
    assert rows[0]["momentum"] == pytest.approx(0.9) and rows[-1]["momentum"] == pytest.approx(1.0)
    assert all({"dino_loss", "ibot_loss", "koleo_loss", "teacher_entropy"} <= set(r) for r in rows)
    assert all("val_dino_loss" in r and "val_momentum" not in r for r in rows)
    monitored = [r for r in metrics(dino_run) if "monitor_knn" in r]
    assert monitored[0]["step"] == 0 and monitored[0]["monitor_knn"] == monitored[0]["teacher_monitor_knn"]
    assert all("teacher_monitor_fewshot_10shot" in r for r in monitored)


def test_evaluation_leaves_the_centres_as_they_were():
    obj = dino(out_dim=32, hidden_dim=16, bottleneck_dim=8, local_crops=1, ibot=1.0).eval()
    views = [torch.randn(4, 3, 16, 16), torch.randn(4, 3, 16, 16), torch.randn(4, 3, 8, 8)]
    with torch.no_grad():
        torch.manual_seed(1)  # iBOT's masks come from torch's generator, which the runner seeds per evaluation
        first = obj({"views": views})
    assert torch.equal(obj.criterion.center, torch.zeros_like(obj.criterion.center))
    assert torch.equal(obj.ibot_criterion.center.center, torch.zeros_like(obj.ibot_criterion.center.center))
    with torch.no_grad():
        torch.manual_seed(1)
        assert torch.equal(obj({"views": views})["loss"], first["loss"])


def test_resuming_continues_student_teacher_and_centres_bit_for_bit(dino_run, tmp_path):
    copy = resumed_copy(dino_run, tmp_path, OPTIONS, dropped=(5, 6))
    for name in ("model.safetensors", "teacher.safetensors", "heads.safetensors"):
        a, b = load_file(dino_run / name), load_file(copy / name)
        assert a.keys() == b.keys()
        assert max(float((a[k] - b[k]).abs().max()) for k in a) == 0.0, name


def test_export_takes_the_student_or_on_request_the_teacher(dino_run, tmp_path):
    student = vitx_cli("export", str(dino_run), "--to", str(tmp_path / "s"))
    teacher = vitx_cli("export", str(dino_run), "--to", str(tmp_path / "t"), "--export-teacher")
    assert student.returncode == 0 and teacher.returncode == 0, student.stderr + teacher.stderr
    assert "teacher's backbone" in teacher.stdout
    s, t = load_file(tmp_path / "s" / "model.safetensors"), load_file(tmp_path / "t" / "model.safetensors")
    saved = load_file(dino_run / "teacher.safetensors")
    assert all(torch.equal(t[k], saved[k]) for k in saved) and any(not torch.equal(s[k], t[k]) for k in saved)
    assert "teacher" in (tmp_path / "t" / "README.md").read_text()


def test_export_teacher_of_a_run_without_one_is_one_line(pretrained_run, tmp_path):
    res = vitx_cli("export", str(pretrained_run), "--to", str(tmp_path / "x"), "--export-teacher")
    assert res.returncode != 0 and res.stderr.count("\n") == 1 and "has no teacher" in res.stderr


@pytest.mark.parametrize("options, needle", [
    ({"local_crops": -1}, "integers"), ({"global_crops": 0}, "positive"), ({"global_crops": 1, "local_crops": 0},
                                                                           "two crops"),
    ({"local_scale": 0.5}, "local_scale"), ({"momentum": 1.5}, "momentum"), ({"teacher_temp": 0}, "temperature"),
    ({"ibot": -1}, "ibot"), ({"local_size": 6}, "multiple of the patch"), ({"crops": 3}, "no option")])
def test_bad_options_are_one_line_errors(options, needle):
    with pytest.raises(vitx.VitxError, match=needle):
        dino(**options)


def test_an_ema_beside_the_teacher_is_refused_in_one_line(tmp_path):
    res = vitx_cli("pretrain", "--objective", "dino(out_dim=32,hidden_dim=16,bottleneck_dim=8,local_crops=1)",
                   "--model", "vit-nano/4", "--data", "embedded:shapes", "--steps", "2", "--ema-decay", "0.9",
                   "--output-dir", str(tmp_path / "run"))
    assert res.returncode != 0 and res.stderr.count("\n") == 1 and "its own moving average" in res.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
