"""Training curves as pictures: curves.png of the session's runs (pretrain, MPP with the monitor, the transfer's
final run), the transfer's sweep.png, `vitx plot` overlays, and that a figure never stops a run. Reads the
session fixtures; trains nothing of its own."""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from .helpers import metrics, vitx_cli
from vitx.errors import VitxError
from vitx.plots import draw_compute, draw_runs, plan_panels, sweep_lines, try_draw
from vitx.plots.series import NOT_DRAWN
from vitx.recipe import parse_sets
from vitx.runner.config import PretrainConfig
from vitx.runner.loop import Trainer
from vitx.transfer import TransferConfig


def _is_picture(path: Path, min_size: tuple[int, int] = (300, 200)) -> None:
    """A real PNG of a sensible size with something drawn on it (many colours, not a blank canvas)."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.width >= min_size[0] and image.height >= min_size[1], image.size
        assert image.width <= 2000 and image.height <= 1500, image.size  # small: cheap to draw at every checkpoint
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 20
    assert not [p for p in path.parent.iterdir() if ".tmp-" in p.name]  # written via a temporary name


def _panels(records: list[dict]) -> dict[str, tuple[str, ...]]:
    return {p.title: p.keys for p in plan_panels(records)}


def _every_key_drawn(records: list[dict]) -> None:
    """Each metrics.jsonl key is on exactly one panel, or is one of the few that are not curves."""
    drawn = [k for keys in _panels(records).values() for k in keys]
    logged = {k for r in records for k in r}
    assert len(drawn) == len(set(drawn))
    assert set(drawn) == logged - NOT_DRAWN


def test_pretrain_writes_curves_of_its_metrics(pretrained_run, tmp_path):
    top, checkpoint = pretrained_run / "curves.png", pretrained_run / "checkpoints" / "step_00000150" / "curves.png"
    _is_picture(top)
    assert os.path.samefile(top, checkpoint)  # the run's picture is its latest checkpoint's
    records = metrics(pretrained_run)
    assert _panels(records) == {"loss": ("loss", "val_loss"), "accuracy": ("top1", "val_top1"),
                                "collapse watch (label-free)": ("rankme_fraction", "feature_std"),
                                "learning rate": ("lr",)}
    assert [r["step"] for r in records if "rankme" in r] == [0, 100]  # the watch: step 0, every 100 steps
    _every_key_drawn(records)


def test_mpp_curves_show_colour_accuracy_against_its_baseline_and_the_monitor(mpp_run):
    _is_picture(mpp_run / "curves.png")
    records = metrics(mpp_run)
    panels = _panels(records)
    assert panels["accuracy"] == ("baseline_acc", "colour_acc")
    assert set(panels["representation monitor"]) == {k for r in records for k in r if k.startswith("monitor_")}
    assert len(panels["representation monitor"]) == 3  # few-shot 1 and 10 shots, kNN
    _every_key_drawn(records)


def test_transfer_draws_its_sweep_and_its_final_run(transfer_run):
    out_dir, out = transfer_run
    root = out_dir / "vtab-dsprites_loc"
    _is_picture(root / "sweep.png", min_size=(250, 200))
    _is_picture(root / "final" / "curves.png")
    assert not list((root / "sweep").glob("*/curves.png"))  # the sweep is one figure, not one per point
    result = out["tasks"][0]
    points = [json.loads(p.read_text()) for p in (root / "sweep").glob("*/point.json")]
    lines = sweep_lines(points)  # what sweep.png draws: val top-1 per lr, a line per step count
    assert lines == {steps: sorted((p["lr"], p["val_top1"]) for p in result["sweep"] if p["steps"] == steps)
                     for steps in (2, 4)}
    assert list(_panels(metrics(root / "final"))) == ["loss", "accuracy", "learning rate"]  # no validation


def test_plot_overlays_two_runs(pretrained_run, mpp_run, tmp_path):
    proc = vitx_cli("plot", str(pretrained_run), str(mpp_run), "--output", str(tmp_path / "both.png"))
    assert proc.returncode == 0, proc.stderr
    assert "2 run(s)" in proc.stdout and "representation monitor" in proc.stdout
    _is_picture(tmp_path / "both.png", min_size=(500, 400))
    panels = {p.title: p.keys for p in draw_runs([pretrained_run, mpp_run], tmp_path / "again.png")}
    assert set(panels["accuracy"]) == {"top1", "val_top1", "colour_acc", "baseline_acc"}  # shared panel
    assert panels["loss"] == ("loss", "val_loss")


def test_plot_errors_are_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "metrics.jsonl").write_text('{"step": 1, "images_per_s": 3.0}\n')
    (tmp_path / "file").write_text("")
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "metrics.jsonl").write_text('garbage\n\n[1, 2]\n')
    (tmp_path / "loss").mkdir()
    (tmp_path / "loss" / "metrics.jsonl").write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.0}\n')
    through = tmp_path / "file" / "x.png"
    for args, says in [([str(tmp_path / "empty")], "no metrics.jsonl in"),
                       ([str(tmp_path / "steps")], "nothing to plot"),
                       ([str(tmp_path / "torn")], "its metrics.jsonl holds 2 lines and none is a metrics record "
                                                  "(damaged, or not vitx's)"),
                       ([str(tmp_path / "steps"), "--output", str(tmp_path / "x.gif")], "cannot write a figure"),
                       ([str(tmp_path / "loss"), "--output", str(through)],  # checked before drawing, as bench's
                        f"error: --output {through}: {tmp_path / 'file'} is a file, not a folder\n")]:
        proc = vitx_cli("plot", *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr


def test_a_figure_that_cannot_be_drawn_is_a_warning_not_a_crash(tmp_path):
    lines: list[str] = []
    assert try_draw("x.png", lambda: 1 / 0, warn=lines.append) is None
    assert lines == ["warning: x.png not drawn (ZeroDivisionError: division by zero)"]
    printed: list[str] = []  # the runner's own call, on a run whose metrics.jsonl is missing
    trainer = SimpleNamespace(setup=SimpleNamespace(cfg=PretrainConfig(), run=SimpleNamespace(path=tmp_path)),
                              step_count=3, console=SimpleNamespace(print=lambda line, **kw: printed.append(line)))
    Trainer.draw_curves(trainer, tmp_path / "curves.png")
    assert len(printed) == 1 and "curves.png not drawn" in printed[0] and not (tmp_path / "curves.png").exists()


def test_curves_is_a_setting_of_runs_and_transfers():
    assert PretrainConfig().curves and TransferConfig().curves
    assert parse_sets(["curves=false"], PretrainConfig) == {"curves": False}  # recipes and --set take it
    assert parse_sets(["curves=off"], TransferConfig) == {"curves": False}


def test_the_compute_figure_draws_each_objective_in_compute_order(tmp_path):
    curves = {"mae": [(2.0, 0.80, 0.01), (0.5, 0.60, 0.02)], "dino": [(4.0, 0.45, 0.02)], "simclr": []}
    drawn = draw_compute(curves, (0.457, 0.013), tmp_path / "compute.png")
    assert drawn == {"mae": [(0.5, 0.60, 0.02), (2.0, 0.80, 0.01)], "dino": [(4.0, 0.45, 0.02)]}  # empty: left out
    with Image.open(tmp_path / "compute.png") as image:
        assert image.size == (320, 260)  # one panel at 100 dpi
    with pytest.raises(VitxError, match="no compute points to draw"):
        draw_compute({"mae": []}, (0.5, 0.01), tmp_path / "none.png")
