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


def test_its_views_are_simclrs_input_pipeline():
    """Two views of each image, each cut from the whole image (data_util.py:469-472), SimCLR's CIFAR-10 colours:
    jitter 0.8 × strength 0.5 (hue 0.2 × 0.5) with probability 0.8 in a random order, gray 0.2, no blur."""
    from vitx.data.views import View

    assert simclr().views() == (View(count=2, size=16, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=0.5,
                                     jitter=(0.4, 0.4, 0.4, 0.1), jitter_p=0.8, gray=0.2, blur=0.0, solarize=0.0),)
    assert simclr(crop_scale=0.3, jitter=0.2, gray=0.0).views()[0].jitter == (0.2, 0.2, 0.2, 0.05)


def test_both_views_go_through_one_forward_as_simclr_concatenates_them():
    """SimCLR's model concatenates the views along the batch (the head's BatchNorm sees 2B rows): the loss is the
    NT-Xent of the two halves of one forward."""
    obj = simclr().train()
    first, second = torch.rand(8, 3, 16, 16) * 2 - 1, torch.rand(8, 3, 16, 16) * 2 - 1
    torch.manual_seed(1)
    loss = obj({"views": [first, second]})["loss"]
    torch.manual_seed(1)
    z0, z1 = obj.head(obj.backbone(torch.cat((first, second)))).chunk(2)
    assert torch.equal(loss, obj.criterion(z0, z1))


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
    """On an image whose channels are its own x and y coordinates, each view the loader cuts (`make_crop` with the
    declared view) shows a box of 0.3–1 of the area, of ratio 3/4–4/3, half of them mirrored."""
    import numpy as np

    from vitx.data.views import expand, make_crop

    size = 64
    view = expand(simclr(crop_scale=0.3, jitter=0.0, gray=0.0).views(), 16)[0]
    coords = torch.arange(size, dtype=torch.float64) / (size - 1) * 255
    image = torch.stack([coords.expand(size, size), coords[:, None].expand(size, size),
                         torch.zeros(size, size, dtype=torch.float64)]).round().to(torch.uint8)  # (3, 64, 64)
    crops = torch.stack([make_crop(image, view, "bilinear", np.random.default_rng(i)) for i in range(256)]).float()
    xs, ys = crops[:, 0], crops[:, 1]  # (256, 16, 16)
    width = (xs.amax((1, 2)) - xs.amin((1, 2))) / 255  # fraction of the side, up to a pixel of the resize
    height = (ys.amax((1, 2)) - ys.amin((1, 2))) / 255
    area, ratio = width * height, width / height
    assert bool(((area > 0.3 - 0.1) & (area < 1.0 + 1e-6)).all()) and float(area.std()) > 0.1
    assert bool(((ratio > 0.75 - 0.15) & (ratio < 4 / 3 + 0.15)).all())
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
