"""The SimCLR plugin (plugins/vitx-simclr): discovered by its entry point, exact view geometry, and it learns."""

import torch

import vitx
from vitx.registry import OBJECTIVES
from vitx.runner import pretrain

from .helpers import metrics


def simclr(**options):
    torch.manual_seed(0)
    return vitx.create_objective("simclr", vitx.create_backbone("vit-nano/4"), None, **options)


def test_discovered_through_its_entry_point():
    assert OBJECTIVES.get("simclr").source == "entry point simclr (vitx-simclr)"


def test_views_without_crop_or_colour_are_the_image_or_its_mirror():
    obj = simclr(crop_scale=1.0, jitter=0.0, gray=0.0)
    images = torch.rand(64, 3, 16, 16) * 2 - 1  # normalised to [-1, 1]
    view = obj.augment(images)
    same = (view - images).abs().amax(dim=(1, 2, 3)) < 1e-5
    mirrored = (view - images.flip(3)).abs().amax(dim=(1, 2, 3)) < 1e-5
    assert bool((same | mirrored).all())  # a full-area crop is the identity, up to the random flip
    assert 16 < int(mirrored.sum()) < 48  # flips about half


def test_grayscale_and_jitter_stay_in_range():
    obj = simclr(crop_scale=1.0, jitter=0.0, gray=1.0)
    view = obj.augment(torch.rand(8, 3, 16, 16) * 2 - 1)
    assert torch.allclose(view[:, 0], view[:, 1], atol=1e-6) and torch.allclose(view[:, 1], view[:, 2], atol=1e-6)
    view = simclr(jitter=0.9).augment(torch.rand(8, 3, 16, 16) * 2 - 1)
    assert view.min() >= -1 - 1e-6 and view.max() <= 1 + 1e-6


def test_evaluation_views_are_fixed_and_training_views_are_not():
    obj = simclr()
    batch = {"image": torch.rand(8, 3, 16, 16) * 2 - 1}
    obj.eval()
    assert torch.equal(obj(batch)["loss"], obj(batch)["loss"])
    obj.train()
    assert not torch.equal(obj(batch)["loss"], obj(batch)["loss"])


def test_simclr_run_learns_to_pair_views(tmp_path):
    run = tmp_path / "run"
    pretrain({"objective": "simclr(temperature=0.2)", "model": "vit-nano/4", "data": "embedded:shapes",
              "batch_size": 64, "steps": 60, "warmup_steps": 5, "lr": 2e-3, "save_every": 60, "log_every": 10,
              "eval_samples": 0, "workers": 0, "log_with": "none", "output_dir": str(run)})
    rows = metrics(run)
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.3, rows
    assert rows[-1]["pair_top1"] > 4 / 64, rows  # chance is 1 / 64
    backbone = vitx.load_backbone(run)  # the checkpoint is a plain backbone
    assert backbone(torch.rand(2, 3, 16, 16)).shape == (2, 64)


def test_crops_are_boxes_of_the_requested_area_and_shape():
    """On an image whose channels are its own x and y coordinates, each view shows the box it was cut from."""
    obj = simclr(crop_scale=0.3, jitter=0.0, gray=0.0)
    size = 64
    coords = (torch.arange(size) + 0.5) / size * 2 - 1  # pixel centres in [-1, 1]
    image = torch.stack([coords.expand(size, size), coords[:, None].expand(size, size), torch.zeros(size, size)])
    views = obj.augment(image.expand(256, 3, size, size).contiguous())
    xs, ys = views[:, 0], views[:, 1]
    width = (xs.amax((1, 2)) - xs.amin((1, 2))) / 2 * size / (size - 1)  # fraction of the side
    height = (ys.amax((1, 2)) - ys.amin((1, 2))) / 2 * size / (size - 1)
    area, ratio = width * height, width / height
    assert bool(((area > 0.3 - 0.05) & (area < 1.0 + 0.05)).all())
    assert bool(((ratio > 0.75 - 0.05) & (ratio < 4 / 3 + 0.05)).all())
    assert bool((xs.abs() <= 1).all() and (ys.abs() <= 1).all())  # inside the image: no reflection padding used
    assert float(area.std()) > 0.1  # the area really varies
    flipped = xs[:, 0, 0] > xs[:, 0, -1]  # x decreasing along the row: a mirrored crop
    assert 64 < int(flipped.sum()) < 192


def test_bad_options_are_one_line_errors():
    import pytest

    for options in [{"proj_dim": -1}, {"temperature": "x"}, {"crop_scale": 0}]:
        with pytest.raises(vitx.VitxError, match="simclr"):
            simclr(**options)


def test_a_batch_without_negatives_or_a_temperature_lightly_refuses_is_one_line(tmp_path):
    """One image per micro-batch has no negative (and the head's BatchNorm one value per channel); a temperature
    under 1e-8 is lightly's ValueError: each refused before the run starts, in one line."""
    from .helpers import vitx_cli

    run = ["--model", "vit-nano/4", "--steps", "2", "--workers", "0", "--output-dir", str(tmp_path / "run")]
    for args, said in ((["--objective", "simclr", "--batch-size", "1"],
                        "error: --objective simclr needs at least 2 images in each process's micro-batch; "
                        "--batch-size 1 gives 1 (over 1 process(es) × 1 accumulation step(s))"),
                       (["--objective", "simclr(temperature=1e-30)"],
                        "error: simclr temperature must be at least 1e-08, got 1e-30")):
        proc = vitx_cli("pretrain", *args, *run)
        assert proc.returncode == 2 and proc.stderr == said + "\n", proc.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
