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


CROP_STARTS = {  # crop mode -> the timm pretrained_cfg it is taken from (at 32px here), and its crop_pct
    "center": ("deit_tiny_patch16_224.fb_in1k", 0.875),  # the short side to floor(S / 0.875), a centre crop
    "squash": ("vit_medium_patch16_gap_384.sw_in12k_ft_in1k", 0.95),  # both sides to floor(S / 0.95), aspect lost
    "border": ("deit_tiny_patch16_224.fb_in1k", 0.9),  # the long side to floor(S / 0.9), padded with the mean colour
}


@pytest.fixture(scope="module")
def crop_starts(tmp_path_factory):
    """A timm-layout folder (save_for_hf) per crop mode: a 1-block DeiT-Ti at 32px with random weights, whose
    pretrained_cfg is the named tag's (squash: vit_medium_patch16_gap_384.sw_in12k_ft_in1k's), resized to 32px."""
    from timm.models import get_pretrained_cfg, save_for_hf

    root, folders = tmp_path_factory.mktemp("crops"), {}
    for mode, (tag, crop_pct) in CROP_STARTS.items():
        given = {k: v for k, v in get_pretrained_cfg(tag).to_dict().items()
                 if k in ("mean", "std", "interpolation", "crop_pct", "crop_mode")}  # the tag's input
        cfg = {**get_pretrained_cfg("deit_tiny_patch16_224.fb_in1k").to_dict(), **given, "input_size": (3, 32, 32),
               "crop_mode": mode, "crop_pct": crop_pct}
        torch.manual_seed(0)
        model = timm.create_model("deit_tiny_patch16_224", img_size=32, depth=1, num_classes=0, pretrained_cfg=cfg)
        save_for_hf(model, str(root / mode), model_args={"img_size": 32, "depth": 1}, safe_serialization=True)
        folders[mode] = root / mode
    return folders


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory):
    """An image folder of JPEGs and PNGs of several aspect ratios (2 classes; 8 train, 4 test images)."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    sides = [(48, 64), (64, 48), (37, 50), (50, 33), (40, 40), (36, 64), (43, 64), (61, 61)]
    for split, count in (("train", 4), ("test", 2)):
        for k, name in enumerate(("cat", "dog")):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                h, w = sides[(2 * i + k + (3 if split == "test" else 0)) % len(sides)]
                picture = Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(1))
                suffix = ("jpg", "png")[i % 2]
                picture.save(root / split / name / f"{i}.{suffix}", **({"quality": 90} if suffix == "jpg" else {}))
    return root


@pytest.mark.parametrize("mode", list(CROP_STARTS))
def test_eval_input_is_timm_s_own_for_every_crop_mode(crop_starts, photo_folder, mode, monkeypatch, tmp_path):
    """`vitx eval linear --data FOLDER` from a timm start: every image the probe extracts features of is the one
    timm's `create_transform(**resolve_data_config(model=m))` makes of the file, to the level (0 levels of 255;
    the normalised floats to rounding), in centre-crop, squash and border mode alike. Before, squash and border
    starts were centre-cropped, and no non-square image matched its file."""
    import vitx.evaluation.features as features
    from timm.data import create_transform, resolve_data_config

    seen = []  # (N, 3, S, S) uint8 batches, as extracted

    def spy(backbone, images, batch=256, device="cpu", normalise=None):
        seen.append((images.clone(), normalise(images)))
        return extract(backbone, images, batch, device, normalise)

    extract = features.extract_features
    monkeypatch.setattr(features, "extract_features", spy)
    out = tmp_path / "linear.json"
    result = vitx_cli("eval", "linear", "--from", str(crop_starts[mode]), "--data", str(photo_folder), "--epochs", "1",
                      "--lrs", "0.1", "--seeds", "0", "--features", "cls-token", "--output", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    model = timm.create_model("deit_tiny_patch16_224", img_size=32, depth=1, num_classes=0,
                              pretrained_cfg=json.loads((crop_starts[mode] / "config.json").read_text())["pretrained_cfg"])
    config = resolve_data_config(model=model)
    assert config["crop_mode"] == mode
    theirs = create_transform(**config)  # (3, S, S) normalised, timm's input
    pixels = create_transform(**config, use_prefetcher=True)  # (3, S, S) uint8, the same before normalising
    for split, (ours, ours_normalised) in zip(("train", "test"), seen):
        files = sorted(p for p in (photo_folder / split).rglob("*.*"))
        expected = torch.stack([pixels(Image.open(f).convert("RGB")) for f in files])  # (N, 3, S, S) uint8
        levels = (ours[:, None].int() - expected[None].int()).abs().amax(dim=(2, 3, 4))  # (N ours, N files)
        match = levels.argmin(1)
        assert sorted(match.tolist()) == list(range(len(files)))  # each file once
        assert levels.min(1).values.max().item() == 0  # 0 levels apart, every image
        normalised = torch.stack([theirs(Image.open(files[int(j)]).convert("RGB")) for j in match])
        assert (normalised - ours_normalised).abs().max().item() < 1e-5
    recorded = json.loads(out.read_text())["input"]
    assert (recorded["crop_mode"], recorded["crop_pct"]) == (mode, CROP_STARTS[mode][1])


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


def test_pretraining_continues_from_another_run(pretrained_run, tmp_path):
    """--from: a pre-training starts from another run's weights (here with a vanishing lr, so its first step
    leaves them as they were), records the start and its architecture, and refuses --model beside it (given as
    --init, its former name, too)."""
    import json

    from vitx.runs import load_backbone

    from .helpers import vitx_cli

    out = tmp_path / "continued"
    res = vitx_cli("pretrain", "--from", str(pretrained_run), "--data", "embedded:digits", "--steps", "1",
                   "--warmup-steps", "0", "--lr", "1e-12", "--batch-size", "8", "--eval-samples", "0", "--workers",
                   "0", "--log-with", "none", "--no-curves", "--output-dir", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    run = json.loads((out / "config.json").read_text())["run"]
    assert (run["start"], run["model"]) == (str(pretrained_run), "vit-nano/4")
    start, continued = load_backbone(pretrained_run).state_dict(), load_backbone(out).state_dict()
    assert max(float((start[k] - continued[k]).abs().max()) for k in start) < 1e-6
    from vitx.export.command import rebuild
    from vitx.runner.config import PretrainConfig

    command = rebuild("pretrain", json.loads((out / "config.json").read_text())["run"], PretrainConfig)
    assert f"--from {pretrained_run}" in command and "--model" not in command  # a command that runs again
    both = vitx_cli("pretrain", "--init", str(pretrained_run), "--model", "vit-nano/4", "--output-dir",
                    str(tmp_path / "x"))
    assert both.returncode == 2 and "give --model (a new backbone) or --from" in both.stderr
