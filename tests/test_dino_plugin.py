"""The DINO plugin (plugins/vitx-dino): multi-crop views from the loader, an EMA teacher that is never optimised,
saved, resumed bit for bit and exported on request, iBOT and KoLeo options, and one-line errors."""
from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import vitx
from vitx.evaluation import feature_name
from vitx.registry import OBJECTIVES

from .helpers import metrics, resumed_copy, tiny, vitx_cli

SPEC = "dino(hidden_dim=32,bottleneck_dim=16,local_crops=2,momentum=0.9,ibot=0.5,koleo=0.1,teacher_temp=0.04," \
       "warmup_teacher_temp=0.02,warmup_teacher_temp_steps=4)"  # out_dim unset: fitted to the data
OPTIONS = dict(objective=SPEC, save_every=1, keep_checkpoints=6, monitor="embedded:digits(length=200, eval_length=50)",
               weight_decay=0.04, weight_decay_end=0.4)  # DINO's weight-decay schedule


@pytest.fixture(scope="module")
def dino_run(tmp_path_factory):
    """6 DINO steps (2 global + 2 local crops, iBOT and KoLeo on), a checkpoint after each (all kept), monitored."""
    from vitx.runner import pretrain

    root = tmp_path_factory.mktemp("dino")
    header = io.StringIO()
    with contextlib.redirect_stdout(header):
        pretrain(tiny(root, **OPTIONS))
    (root / "stdout.txt").write_text(header.getvalue())
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
    assert feature_name(config["features"]) == "cls-token"  # the [class] token (recorded as the plugin names it)
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
    # DINO's warm-up: np.linspace(warmup_teacher_temp, teacher_temp, W), reaching the end at step W - 1
    assert [r["teacher_temp"] for r in rows] == pytest.approx([*np.linspace(0.02, 0.04, 4), 0.04, 0.04])
    # DINO's cosine_scheduler(0.04, 0.4, ...) over the 6 steps, for the update each row's step made
    assert [r["weight_decay"] for r in rows] == pytest.approx(
        [0.4 + 0.5 * (0.04 - 0.4) * (1 + math.cos(math.pi * s / 6)) for s in range(6)])
    # DINO's cosine_scheduler(0.9, 1, ...) (utils.py:193-194), the momentum of the update each row's step makes
    assert [r["momentum"] for r in rows] == pytest.approx(
        [1 + 0.5 * (0.9 - 1) * (1 + math.cos(math.pi * s / 6)) for s in range(6)], abs=1e-7)  # (float32)
    diagnostics = {"teacher_entropy", "teacher_batch_entropy", "teacher_student_kl"}
    assert all({"dino_loss", "ibot_loss", "koleo_loss", *diagnostics} <= set(r) for r in rows)
    k = json.loads((dino_run / "config.json").read_text())["objective"]["options"]["out_dim"]
    assert all(r["teacher_student_kl"] > 0 and 0 < r["teacher_entropy"] < math.log(k) for r in rows)
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


@pytest.mark.parametrize("options, said", [
    # generated from DINOOptions: an unknown name, a wrong type, a value out of its declared bounds
    ({"crops": 3}, "dino has no option 'crops'; did you mean local_crops, global_crops? (vitx objectives dino "
                   "lists them)"),
    ({"out_dim": 1.5}, "dino out_dim must be an integer, got 1.5"),
    ({"norm_last_layer": 1}, "dino norm_last_layer must be true or false, got 1"),
    ({"blur_sigma": 1.0}, "dino blur_sigma must be a list of numbers, got 1.0"),
    ({"blur_sigma": (0.1, 2.0, 3.0)}, "dino blur_sigma takes 2 values, e.g. (0.1, 2.0); got [0.1, 2.0, 3.0]"),
    ({"local_crops": -1}, "dino local_crops must be in [0, 64], got -1"),
    ({"local_crops": 100000}, "dino local_crops must be in [0, 64], got 100000"),  # issue 47: 2.6 GB of loader
    ({"out_dim": 300000}, "dino out_dim must be in [1, 262144], got 300000"),
    ({"hidden_dim": 100000}, "dino hidden_dim must be in [1, 16384], got 100000"),
    ({"global_crops": 0}, "dino global_crops must be in [1, 8], got 0"),
    ({"momentum": 1.5}, "dino momentum must be in [0, 1], got 1.5"),
    ({"teacher_temp": 0}, "dino teacher_temp must be positive, got 0"),
    ({"ibot": -1}, "dino ibot must not be negative, got -1"),
    ({"freeze_last_layer": -1}, "dino freeze_last_layer must not be negative, got -1"),
    ({"centering": "median"}, "dino centering must be one of mean, sinkhorn, got 'median'"),
    # relations between options, and with the backbone: the checks still written by hand
    ({"global_crops": 1, "local_crops": 0}, "dino needs at least two crops in all"),
    ({"local_scale": 0.5}, "dino needs local_scale < global_scale, got 0.5 and 0.4"),
    ({"blur_sigma": (2.0, 1.0)}, "dino blur_sigma must be (low, high) pixels with low <= high, got (2.0, 1.0)"),
    ({"local_size": 6}, "multiple of the patch"),
    ({"local_size": 64}, "dino local_size 64 is larger than the image (16 px): local crops are the small views")])
def test_bad_options_are_one_line_errors(options, said):
    with pytest.raises(vitx.VitxError) as caught:
        dino(**options)
    assert said in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("images, fitted", [
    # lightly-train 8f5a75c src/lightly_train/_methods/dino/dino.py:86-151 (`_scaling.interpolate` rounds to 2
    # digits and clamps; `get_bucket_value` takes the first bucket whose threshold is above the size); a warm-up
    # temperature below the fitted one warms up over 37,500 steps (here 30% of a 100,000-step run)
    (1437, {"out_dim": 1024, "teacher_temp": 0.02, "warmup_teacher_temp": 0.02}),  # embedded:digits' train split
    (19_999, {"out_dim": 1024, "teacher_temp": 0.02, "warmup_teacher_temp": 0.02}),
    (20_000, {"out_dim": 2048, "teacher_temp": 0.02, "warmup_teacher_temp": 0.02}),
    (100_000, {"out_dim": 16384, "teacher_temp": 0.02, "warmup_teacher_temp": 0.02}),
    (300_000, {"out_dim": 32768, "teacher_temp": 0.03, "warmup_teacher_temp": 0.02,  # 0.0343 → 0.03
               "warmup_teacher_temp_steps": 30_000}),
    (510_000, {"out_dim": 65536, "teacher_temp": 0.04, "warmup_teacher_temp": 0.03,  # 0.045 → 0.04; 0.028
               "warmup_teacher_temp_steps": 30_000}),
    (1_281_167, {"out_dim": 65536, "teacher_temp": 0.07, "warmup_teacher_temp": 0.04,  # ImageNet: DINO's end
                 "warmup_teacher_temp_steps": 30_000})])
def test_defaults_are_fitted_to_the_number_of_training_images_by_lightly_trains_rule(images, fitted):
    from vitx.objectives import fit_to_data

    made = fit_to_data("dino", {}, images, 100_000)
    assert made.values == fitted and made.images == images and "lightly-train" in made.rule
    assert made.values["warmup_teacher_temp"] <= made.values["teacher_temp"]


def test_an_explicit_setting_always_wins_over_the_fitted_default():
    from vitx.objectives import fit_to_data

    assert fit_to_data("dino", {"out_dim": 64}, 1437, 1000).values == {"teacher_temp": 0.02, "warmup_teacher_temp": 0.02}
    # a given teacher temperature keeps DINO's warm-up default; a given warm-up stays as given
    assert fit_to_data("dino", {"teacher_temp": 0.07}, 1437, 1000).values == {"out_dim": 1024}
    assert fit_to_data("dino", {"warmup_teacher_temp": 0.01}, 1437, 1000).values == {  # (warmed up to the fitted 0.02)
        "out_dim": 1024, "teacher_temp": 0.02, "warmup_teacher_temp_steps": 300}
    assert fit_to_data("dino", {"out_dim": 64, "teacher_temp": 0.04}, 1437, 1000) is None
    # on ImageNet, a long run warms up over lightly-train's 37,500 steps; a given warm-up length stays as given
    assert fit_to_data("dino", {"out_dim": 64}, 1_281_167, 10**6).values["warmup_teacher_temp_steps"] == 37_500
    assert "warmup_teacher_temp_steps" not in fit_to_data("dino", {"warmup_teacher_temp_steps": 0}, 1_281_167, 10**6).values
    assert fit_to_data("dino", {}, None, 1000) is None  # a stream: its size is unknown, DINO's defaults stay
    with pytest.raises(vitx.VitxError, match="dino local_crops must be in"):
        fit_to_data("dino", {"local_crops": 100000}, 1437, 1000)  # the given options are checked first


def test_the_run_says_and_records_what_it_fitted_and_a_resume_rebuilds_it(dino_run):
    """The fixture's run leaves out_dim unset: fitted to embedded:shapes' training images, said in the header and
    recorded in config.json (a resume is built from the record: `test_resuming_...` below is bit-exact on it)."""
    config = json.loads((dino_run / "config.json").read_text())
    fitted = config["objective"]["fitted"]
    images = config["data"]["train_size"]
    assert fitted == {"values": {"out_dim": 2048 if images >= 20_000 else 1024}, "images": images,
                      "rule": "lightly-train's rule, _methods/dino/dino.py:86-151"}
    assert config["objective"]["options"]["out_dim"] == fitted["values"]["out_dim"]
    assert config["objective"]["options"]["teacher_temp"] == 0.04  # given: not fitted
    header = (dino_run.parent / "stdout.txt").read_text()
    assert (f"dino: out_dim {fitted['values']['out_dim']} fitted to {images:,} training images (lightly-train's "
            "rule, _methods/dino/dino.py:86-151); set them to override") in header
    heads = load_file(dino_run / "heads.safetensors")
    assert heads["criterion.center"].shape[-1] == fitted["values"]["out_dim"]


def test_an_ema_beside_the_teacher_is_refused_in_one_line(tmp_path):
    res = vitx_cli("pretrain", "--objective", "dino(out_dim=32,hidden_dim=16,bottleneck_dim=8,local_crops=1)",
                   "--model", "vit-nano/4", "--data", "embedded:shapes", "--steps", "2", "--ema-decay", "0.9",
                   "--output-dir", str(tmp_path / "run"))
    assert res.returncode != 0 and res.stderr.count("\n") == 1 and "its own moving average" in res.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_dinos_head_findings_read_its_teacher_entropies():
    obj = dino(out_dim=1024, hidden_dim=16, bottleneck_dim=8, teacher_temp=0.04, center_momentum=0.9)
    assert obj.head_findings({"teacher_entropy": 3.0, "teacher_batch_entropy": 5.0}) == []
    # the CPU plan's DINO at step 300 (recipes/reproduction/DINO.md): uniform, KL small
    [uniform] = obj.head_findings({"teacher_entropy": 6.899, "teacher_batch_entropy": 6.928, "teacher_student_kl": 0.029})
    assert (uniform.state, uniform.figure, uniform.value) == ("uniform", "teacher_entropy", 6.899)
    assert uniform.threshold == pytest.approx(0.98 * math.log(1024))
    assert "(entropy 6.899 ≥ 0.98 × log K = 6.793; KL(teacher ‖ student) 0.029)" in uniform.said
    assert "a lower teacher_temp (now 0.04), a smaller out_dim K (now 1,024)" in uniform.advice
    # near uniform, the student still far from its targets (step 100 of that run: KL 0.265): no finding
    assert obj.head_findings({"teacher_entropy": 6.80, "teacher_batch_entropy": 6.93, "teacher_student_kl": 0.265}) == []
    [one_hot] = obj.head_findings({"teacher_entropy": 0.01, "teacher_batch_entropy": 0.2})
    assert one_hot.state == "one-hot" and "higher teacher_temp" in one_hot.advice
    # the teacher temperature 0.08 / centre momentum 0.999 run at step 120 (docs/collapse.md): the same output for
    # every image, neither uniform nor one-hot
    [same] = obj.head_findings({"teacher_entropy": 5.759, "teacher_batch_entropy": 5.765, "teacher_student_kl": 0.006})
    assert same.state == "constant" and same.value == pytest.approx(0.006) and "0.006 nats" in same.said


# Measured (docs/collapse.md): vit-nano/4, digits at 32px, 64 a step, every 10 steps: (step, teacher entropy,
# batch-mean entropy, KL, RankMe, monitor kNN, 10-shot); RankMe every 20 steps, the monitor every 40
APPENDIX_D = [(0, None, None, None, 4.6352, 0.5806, 0.3815), (10, 5.7885, 6.0612, 0.6182, None, None, None),
              (20, 5.8072, 6.0478, 0.2933, 1.9498, None, None), (30, 5.8086, 5.9585, 0.1666, None, None, None),
              (40, 5.7927, 5.8815, 0.0915, 1.7797, 0.5694, 0.3713), (50, 5.7719, 5.8196, 0.0497, None, None, None),
              (60, 5.7538, 5.7877, 0.0348, 1.7656, None, None), (70, 5.7422, 5.7625, 0.0205, None, None, None),
              (80, 5.7357, 5.7502, 0.0146, 1.7621, 0.5583, 0.363), (90, 5.7375, 5.7492, 0.0119, None, None, None),
              (100, 5.738, 5.7469, 0.009, 1.7549, None, None), (110, 5.7508, 5.7579, 0.0072, None, None, None),
              (120, 5.7588, 5.765, 0.0063, 1.7468, 0.5639, 0.3676)]
THIS_ROUND = [(0, None, None, None, 4.6352, 0.5806, 0.3815), (40, 2.5111, 3.4141, 1.0903, 2.198, 0.5361, 0.3583),
              (80, 5.699, 6.1297, 0.4417, 2.2209, 0.5278, 0.3426), (120, 6.5268, 6.7535, 0.2321, 2.2466, 0.5389, 0.337),
              (160, 6.7212, 6.8748, 0.1596, 2.2392, 0.5444, 0.3306), (180, 6.7526, 6.894, 0.1455, 2.2307, None, None),
              (200, 6.7586, 6.8987, 0.1443, 2.2285, 0.5389, 0.3269), (220, 6.7642, 6.9019, 0.1422, 2.2278, None, None),
              (240, 6.7674, 6.9033, 0.1416, 2.2276, 0.5389, 0.3269)]


@pytest.mark.parametrize("run, monitored, said", [(APPENDIX_D, True, [("collapse", 90, "rankme")]),
                                                  (APPENDIX_D, False, [("collapse", 90, "rankme")]),
                                                  (THIS_ROUND, True, []), (THIS_ROUND, False, [])])
def test_the_collapse_watch_on_dinos_measured_runs(run, monitored, said):
    """Teacher temperature 0.08 with centre momentum 0.999 (DINO's Appendix D): the same teacher output for every
    image, and features that stop improving (RankMe: the monitor has two readings since step 0, fewer than it needs
    to judge), a collapse, with the monitor's figures beside it; main_dino.py's recipe at 240 steps of 64: its head
    near uniform with KL 0.14, nothing said."""
    from vitx.evaluation.collapse import Watch, chance_bound

    keys = ("teacher_entropy", "teacher_batch_entropy", "teacher_student_kl", "rankme", "monitor_knn",
            "monitor_fewshot_10shot")
    obj = dino(out_dim=1024, hidden_dim=16, bottleneck_dim=8, teacher_temp=0.08, center_momentum=0.999)
    watch = Watch(obj.head_findings, {"monitor_": chance_bound([i % 10 for i in range(360)])} if monitored else {})
    found = [f for step, *values in run for f in watch.observe(step, {
        k: v for k, v in zip(keys, values) if v is not None and (monitored or not k.startswith("monitor_"))})]
    assert [(f.kind, f.step, f.record()["figure"]) for f in found] == said
    if said:
        assert found[-1].record()["head"]["state"] == "constant"
        assert "RankMe 1.76: no higher than at step 0 (4.64) nor 3 watches before (1.95)" in found[-1].line()
        assert ("the monitor's best accuracy 55.8%, 58.1% at step 0, chance 10.0%" in found[-1].line()) == monitored


def test_local_crops_position_embeddings_are_resampled_as_dino_does():
    """facebookresearch/dino vision_transformer.py `interpolate_pos_encoding`, its patch part."""
    from vitx_dino import dino_pos_embed

    torch.manual_seed(0)
    pos = torch.randn(1, 1 + 14 * 14, 8)  # (1, 1 + G·G, D) with a [class] position
    patch_pos_embed, n, dim = pos[:, 1:], 14 * 14, 8
    w0, h0 = 6 + 0.1, 6 + 0.1
    dinos = torch.nn.functional.interpolate(
        patch_pos_embed.reshape(1, int(math.sqrt(n)), int(math.sqrt(n)), dim).permute(0, 3, 1, 2),
        scale_factor=(w0 / math.sqrt(n), h0 / math.sqrt(n)), mode="bicubic")
    dinos = dinos.permute(0, 2, 3, 1).view(1, -1, dim)
    assert torch.equal(dino_pos_embed(pos, (6, 6), 1), dinos)


def test_a_local_crop_is_encoded_as_dinos_vision_transformer_does():
    """facebookresearch/dino vision_transformer.py `prepare_tokens` (patches, [class] token prepended, positions
    resampled and added), then the blocks and the norm: DINO's encode through the backbone's public stages."""
    from vitx_dino import dino_pos_embed

    obj = dino(out_dim=32, hidden_dim=16, bottleneck_dim=8, local_crops=1, ibot=0.5).eval()
    bb = obj.backbone
    crops = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(3))  # a 2x2 grid of the 4x4 table
    with torch.no_grad():
        x = bb.patch_embed(crops)  # (B, 4, D)
        pos = torch.cat([bb.pos_embed[:, :1], dino_pos_embed(bb.pos_embed, (2, 2), 1)], 1)  # (1, 1 + 4, D)
        tokens = torch.cat([bb.cls_token.expand(2, -1, -1), x], 1) + pos
        assert torch.equal(obj.encode(bb, crops), bb.norm(bb.blocks(tokens)))
        globals_ = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))
        assert torch.equal(obj.encode(bb, globals_), bb.forward_features(globals_))  # its own grid: timm's
        mask = torch.zeros(2, 16, dtype=torch.bool)
        mask[:, :5] = True
        hook = bb.patch_embed.register_forward_hook(
            lambda module, args, out: torch.where(mask[..., None], obj.mask_token, out))
        expected = bb.forward_features(globals_)  # iBOT: the [mask] token in place of those patch embeddings
        hook.remove()
        assert torch.equal(obj.encode(bb, globals_, mask), expected)


def test_the_last_layer_is_frozen_for_the_first_epoch_by_default():
    obj = dino(out_dim=32, hidden_dim=16, bottleneck_dim=8)
    obj.epoch_steps = 3  # what the runner sets: steps per pass over the data
    obj.on_fit_start(0, 10)
    last = list(obj.head.last_layer.parameters())
    for step, frozen in ((0, True), (2, True), (3, False)):
        obj.step = step
        for p in last:
            p.grad = torch.ones_like(p)
        obj.on_after_backward()
        assert all((p.grad is None) == frozen for p in last), step
    told = dino(out_dim=32, hidden_dim=16, bottleneck_dim=8, freeze_last_layer=0)
    told.epoch_steps = 3
    told.on_fit_start(0, 10)
    assert told.frozen_steps == 0  # an explicit count (steps) wins


def test_blur_is_drawn_in_pixels_whatever_the_crop_size():
    views = dino(local_crops=2).views()
    assert all(v.sigma == (0.1, 2.0) for v in views)  # DINO's radius 0.1–2 px for 224 and 96 px crops alike
    assert all(v.sigma == (0.05, 0.5) for v in dino(local_crops=2, blur_sigma=(0.05, 0.5)).views())


def test_sinkhorn_centering_is_dinov2s_teacher_and_the_loss_pairs_crops_as_dinos():
    """centering=sinkhorn: the teacher's targets are DINOv2's Sinkhorn-Knopp over the batch (rows sum to 1, each
    dimension near an equal share; a shift of the logits changes nothing) and the loss is DINO's cross-view
    cross-entropy on them: with mean centring's targets, `cross_view_entropy` is lightly's DINOLoss."""
    from lightly.loss import DINOLoss
    from vitx_dino import cross_view_entropy, sinkhorn_teacher

    torch.manual_seed(0)
    logits = torch.randn(64, 8)  # (g·B, K): more images than dimensions, so equal shares are reachable
    p = sinkhorn_teacher(logits, 0.5)
    assert torch.allclose(p.sum(1), torch.ones(64), atol=1e-6)
    shares, plain = p.sum(0), torch.softmax(logits / 0.5, -1).sum(0)  # (K,) images per dimension
    assert shares.max() - shares.min() < (plain.max() - plain.min()) / 2.5  # 2.4 against 6.9 images here
    assert torch.allclose(sinkhorn_teacher(logits, 0.5, iterations=50).sum(0), torch.full((8,), 8.0), atol=1e-3)
    assert torch.allclose(sinkhorn_teacher(logits + 7.0, 0.5), p, atol=1e-6)
    assert torch.allclose(sinkhorn_teacher(torch.zeros(6, 3), 0.04), torch.full((6, 3), 1 / 3))  # no signal: uniform
    teacher, student = list(torch.randn(2, 4, 8)), list(torch.randn(3, 4, 8))  # 2 global crops; 3 crops in all
    lightly = DINOLoss(8, 0.07, 0.07, 1, 0.1, 0.9)(teacher, student, teacher_temp=0.07)
    targets = [torch.softmax(t / 0.07, -1) for t in teacher]  # lightly's centre starts at 0
    assert cross_view_entropy(targets, student, 0.1).item() == pytest.approx(lightly.item(), rel=1e-6)
    obj = dino(out_dim=32, hidden_dim=16, bottleneck_dim=8, local_crops=1, centering="sinkhorn").train()
    views = [torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16), torch.randn(8, 3, 8, 8)]
    out = obj({"views": views})
    assert torch.isfinite(out["loss"]) and torch.equal(obj.criterion.center, torch.zeros_like(obj.criterion.center))
    assert 0 < out["teacher_entropy"].item() <= math.log(32) + 1e-5


@pytest.mark.parametrize("given", [None, "none", "None"])
def test_an_option_that_may_be_none_takes_none_as_its_refusal_says(given):
    """freeze_last_layer is "an integer or none": None, 'none' (a spec's quoted text) mean its default."""
    assert dino(freeze_last_layer=given, local_crops=2).settings.freeze_last_layer is None
