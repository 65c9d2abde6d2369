"""The moving average of the weights (`--ema-decay`): what it is, that it is evaluated, saved and resumed exactly,
and that `--use-ema` reads it wherever a start is read."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from .helpers import metrics, resumed_copy, tiny, vitx_cli

DECAY = 0.9


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    """6 supervised steps with an EMA, a checkpoint after each (all kept), monitored."""
    from vitx.runner import pretrain

    root = tmp_path_factory.mktemp("ema")
    pretrain(tiny(root, **OPTIONS))
    return root / "run"


OPTIONS = dict(ema_decay=DECAY, save_every=1, keep_checkpoints=6, monitor="embedded:digits(length=200, eval_length=50)")


def test_the_average_is_timms_warmed_up_ema_of_the_live_weights(ema_run):
    """Replayed from the live weights of every step: e₁ = w₁, then eₜ = lerp(eₜ₋₁, wₜ, 1 − dₜ) with timm's warm-up
    dₜ = min(0.9, 1 − t^(−2/3)); the heads' average too."""
    for kind in ("model", "heads"):
        steps = [load_file(ema_run / "checkpoints" / f"step_{t:08d}" / f"{kind}.safetensors") for t in range(1, 7)]
        average = dict(steps[0])
        for t, live in enumerate(steps[1:], start=2):
            weight = 1.0 - min(DECAY, 1 - (1 + (t - 1)) ** (-2 / 3))
            average = {k: torch.lerp(v, live[k], weight) for k, v in average.items()}
        saved = load_file(ema_run / ("ema.safetensors" if kind == "model" else "ema_heads.safetensors"))
        assert set(saved) == set(average)
        for k, v in saved.items():
            torch.testing.assert_close(v, average[k], rtol=0, atol=1e-7)
        assert any(not torch.equal(steps[-1][k], saved[k]) for k in saved)  # the average lags the weights


def test_the_average_is_evaluated_and_monitored_beside_the_live_weights(ema_run):
    rows = [r for r in metrics(ema_run) if "val_loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all("ema_val_loss" in r and "ema_val_top1" in r for r in rows)
    assert rows[0]["ema_val_loss"] == rows[0]["val_loss"]  # after one step the average is the weights
    assert all(r["ema_val_loss"] != r["val_loss"] for r in rows[1:])
    monitored = [r for r in metrics(ema_run) if "monitor_knn" in r and r["step"] > 0]
    assert monitored and all("ema_monitor_knn" in r and "ema_monitor_fewshot_1shot" in r for r in monitored)
    config = json.loads((ema_run / "config.json").read_text())
    assert config["run"]["ema_decay"] == DECAY


def test_resuming_continues_the_average_bit_for_bit(ema_run, tmp_path):
    """Drop the last two checkpoints of a copy and resume it from step 4: live and average weights are the
    uninterrupted run's exactly."""
    copy = resumed_copy(ema_run, tmp_path, OPTIONS, dropped=(5, 6))
    for name in ("model.safetensors", "ema.safetensors", "ema_heads.safetensors"):
        a, b = load_file(ema_run / name), load_file(copy / name)
        assert max(float((a[k] - b[k]).abs().max()) for k in a) == 0.0, name


def test_use_ema_reads_the_average_and_refuses_a_run_without_one(ema_run, pretrained_run, tmp_path):
    from vitx.runs.start import load_start

    average = load_file(ema_run / "ema.safetensors")
    backbone = load_start(str(ema_run), use_ema=True)
    assert all(torch.equal(v, average[k]) for k, v in backbone.state_dict().items())
    proc = vitx_cli("eval", "knn", "--from", str(pretrained_run), "--use-ema", "--test-samples", "20")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: --from {pretrained_run} has no moving average of its weights (ema.safetensors: it was trained "
        "without --ema-decay); drop --use-ema")
    out = tmp_path / "knn.json"
    proc = vitx_cli("eval", "knn", "--from", str(ema_run), "--use-ema", "--data", "embedded:digits",
                    "--test-samples", "50", "--k", "5", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["use_ema"] is True


@pytest.mark.parametrize("value,needle", [("1", "--ema-decay must be in [0, 1), got 1"),
                                          ("-0.1", "--ema-decay must be in [0, 1), got -0.1")])
def test_ema_decay_is_checked_in_one_line(value, needle, tmp_path):
    proc = vitx_cli("pretrain", "--ema-decay", value, "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {needle}"


def test_export_and_predict_take_the_average(ema_run, tmp_path):
    """`vitx export --use-ema` writes the average (and says so in the card); `vitx predict --use-ema` classifies
    with it: other probabilities than the live weights give."""
    from PIL import Image

    proc = vitx_cli("export", str(ema_run), "--to", str(tmp_path / "out"), "--use-ema")
    assert proc.returncode == 0, proc.stderr[-2000:]
    exported, average = load_file(tmp_path / "out" / "model.safetensors"), load_file(ema_run / "ema.safetensors")
    assert all(torch.equal(exported[k], v) for k, v in average.items() if k in exported)
    assert "the moving average of the weights (EMA, decay 0.9" in (tmp_path / "out" / "README.md").read_text()
    Image.new("RGB", (16, 16), (200, 30, 30)).save(tmp_path / "red.png")
    live, ema = (json.loads(vitx_cli("predict", str(ema_run), str(tmp_path / "red.png"), "--json", *flag).stdout)
                 for flag in ([], ["--use-ema"]))
    assert live != ema


def test_a_transfer_keeps_an_average_and_starts_from_one(ema_run, tmp_path):
    """`vitx transfer --use-ema --ema-decay`: the start is the run's average; the result tests the fine-tuned
    average beside the live weights, per seed."""
    from vitx.transfer import TransferConfig, transfer

    cfg = TransferConfig(start=str(ema_run), use_ema=True, ema_decay=0.5, sweep=False, lr=0.01, steps=3,
                         task="vtab/dsprites_loc", shots=20, batch_size=8, test_samples=32, seeds=[0, 1], workers=0,
                         curves=False, output_dir=str(tmp_path / "t"))
    result = transfer(cfg)["tasks"][0]
    assert len(result["ema_test_top1_per_seed"]) == 2 and "ema_test_top1_std" in result
    assert result["use_ema"] is True and result["ema_decay"] == 0.5
    final = next((tmp_path / "t").glob("*/final"))
    assert (final / "ema.safetensors").is_file() and (final / "ema_heads.safetensors").is_file()
    assert json.loads((final / "config.json").read_text())["run"]["start"] == str(ema_run)
