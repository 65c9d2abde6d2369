"""Starts from timm's own layout: a local folder as timm's `save_for_hf` writes it, built here with timm (no
download), is a start (`--from DIR`, `timm:local-dir:DIR`), and the start decides the input: its
`pretrained_cfg` mean, std, interpolation and crop, pixel for pixel as timm's own eval transform."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter

from .helpers import vitx_cli

timm = pytest.importorskip("timm")


@pytest.fixture(scope="module")
def deit_folder(tmp_path_factory):
    """DeiT-Ti (ImageNet mean/std, crop 0.9) at 32px, random weights, in timm's hub layout (safetensors)."""
    from timm.models import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model("deit_tiny_patch16_224", img_size=32, num_classes=0)
    folder = tmp_path_factory.mktemp("timm") / "deit"
    save_for_hf(model, str(folder), model_args={"img_size": 32}, safe_serialization=True)
    return folder


def test_a_timm_folder_is_a_start_recorded_as_its_architecture(deit_folder):
    from vitx.backbones import backbone_record
    from vitx.runs.start import load_start

    a, b = load_start(str(deit_folder)), load_start(f"timm:local-dir:{deit_folder}")
    for name, tensor in a.state_dict().items():
        assert torch.equal(tensor, b.state_dict()[name])
    record = backbone_record(a)
    assert record["name"] == "timm:deit_tiny_patch16_224" and record["overrides"]["img_size"] == [32, 32]
    assert "pretrained" not in record["overrides"]  # rebuilt from the record without the folder, weights after


def test_the_start_decides_the_input_pixel_for_pixel_as_timm(deit_folder):
    from timm.data import create_transform, resolve_data_config

    from vitx.data import Preprocess, decode
    from vitx.runs.start import load_start, start_input

    model = load_start(str(deit_folder)).eval()
    config = resolve_data_config({}, model=model)
    given = start_input(str(deit_folder), model)
    assert given["mean"] == pytest.approx(list(config["mean"])) and given["std"] == pytest.approx(list(config["std"]))
    assert (given["interpolation"], given["crop_pct"]) == (config["interpolation"], config["crop_pct"]) == ("bicubic", 0.9)
    pre = Preprocess(image_size=32, mean=tuple(given["mean"]), std=tuple(given["std"]),
                     interpolation=given["interpolation"], eval_crop_pct=given["crop_pct"], eval_resize="timm")
    transform = create_transform(**config)
    for shape in ((60, 48), (40, 90)):
        picture = Image.fromarray((np.random.default_rng(0).random((*shape, 3)) * 255).astype(np.uint8))
        picture = picture.filter(ImageFilter.GaussianBlur(2))
        theirs = transform(picture).unsqueeze(0)  # (1, 3, 32, 32)
        ours = pre.normalise(pre.eval(decode(picture)).unsqueeze(0))
        assert (theirs - ours).abs().max() < 1e-6
        with torch.no_grad():
            assert (model(theirs) - model(ours)).abs().max() < 1e-5


def test_eval_and_transfer_record_the_starts_input(deit_folder, tmp_path):
    result = vitx_cli("eval", "fewshot", "--from", str(deit_folder), "--data", "embedded:digits", "--shots", "1",
                      "--seeds", "1", "--test-samples", "20", "--output", str(tmp_path / "fs.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    recorded = json.loads((tmp_path / "fs.json").read_text())["input"]
    assert recorded["mean"] == pytest.approx([0.485, 0.456, 0.406]) and recorded["crop_pct"] == 0.9
    assert recorded["eval_resize"] == "timm" and recorded["from"] == "timm's pretrained_cfg"
    result = vitx_cli("eval", "fewshot", "--from", str(deit_folder), "--data", "embedded:digits", "--shots", "1",
                      "--seeds", "1", "--test-samples", "20", "--std", "0.5,0.5,0.5", "--output", str(tmp_path / "o.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    recorded = json.loads((tmp_path / "o.json").read_text())["input"]
    assert recorded["std"] == [0.5, 0.5, 0.5] and recorded["mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert recorded["from"] == "--mean/--std/--interpolation"
    from vitx.transfer import TransferConfig
    from vitx.transfer.finetune import prepare
    from vitx.tasks import get_task

    cfg = TransferConfig(task="embedded/digits", start=str(deit_folder), shots=10, workers=0)
    prep = prepare(cfg, get_task("embedded/digits"))
    assert prep.preprocess.mean == pytest.approx((0.485, 0.456, 0.406)) and prep.input_from == "timm's pretrained_cfg"
    cfg = TransferConfig(task="embedded/digits", start=str(deit_folder), shots=10, workers=0, mean=[0.5] * 3,
                         std=[0.5] * 3)
    assert prepare(cfg, get_task("embedded/digits")).preprocess.std == (0.5, 0.5, 0.5)  # the flags override


def test_pickled_weights_in_a_timm_folder_are_refused(deit_folder, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text((deit_folder / "config.json").read_text())
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    result = vitx_cli("eval", "fewshot", "--from", str(folder), "--data", "embedded:digits")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {folder} has no model.safetensors (weights found: pytorch_model.bin); "
                                     "vitx reads safetensors only: save with timm's save_for_hf(..., "
                                     "safe_serialization=True)")


def test_pretraining_on_from_timm_weights_keeps_their_normalisation(deit_folder, tmp_path):
    """`--model 'timm:local-dir:DIR(pretrained=True)'` continues from timm's weights, so the run normalises
    with their `pretrained_cfg` (ImageNet's here), not the paper's 0.5."""
    result = vitx_cli("pretrain", "--model", f"timm:local-dir:{deit_folder}(pretrained=True)", "--steps", "1",
                      "--batch-size", "4", "--warmup-steps", "0", "--eval-samples", "4", "--workers", "0",
                      "--log-with", "none", "--no-curves", "--output-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-2000:]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["preprocess"]["mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert config["backbone"]["name"] == "timm:deit_tiny_patch16_224"
    assert "pretrained" not in config["backbone"]["overrides"]  # the saved run reloads offline

    from vitx import load_backbone

    load_backbone(tmp_path / "run")


def test_pretraining_continues_from_another_run_with_init(pretrained_run, tmp_path):
    """--init: a pre-training starts from another run's weights (here with a vanishing lr, so its first step
    leaves them as they were), records the start and its architecture, and refuses --model beside it."""
    import json

    import torch

    from vitx.runs import load_backbone

    from .helpers import vitx_cli

    out = tmp_path / "continued"
    res = vitx_cli("pretrain", "--init", str(pretrained_run), "--data", "embedded:digits", "--steps", "1",
                   "--warmup-steps", "0", "--lr", "1e-12", "--batch-size", "8", "--eval-samples", "0", "--workers",
                   "0", "--log-with", "none", "--no-curves", "--output-dir", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    run = json.loads((out / "config.json").read_text())["run"]
    assert (run["init"], run["model"]) == (str(pretrained_run), "vit-nano/4")
    start, continued = load_backbone(pretrained_run).state_dict(), load_backbone(out).state_dict()
    assert max(float((start[k] - continued[k]).abs().max()) for k in start) < 1e-6
    from vitx.export.command import rebuild
    from vitx.runner.config import PretrainConfig

    command = rebuild("pretrain", json.loads((out / "config.json").read_text())["run"], PretrainConfig)
    assert f"--init {pretrained_run}" in command and "--model" not in command  # a command that runs again
    both = vitx_cli("pretrain", "--init", str(pretrained_run), "--model", "vit-nano/4", "--output-dir",
                    str(tmp_path / "x"))
    assert both.returncode == 2 and "give --model (a new backbone) or --init" in both.stderr
