"""The VTAB-1k folder release (NOAH's get_vtab1k.py layout), read as it is: its own train800 / val200 /
train800val200 / test lists, for one task and for a suite under one root."""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitx.errors import VitxError
from vitx.tasks import get_task, open_task

from .helpers import vitx_cli

SIZES = {"train800": 16, "val200": 4, "test": 8}  # a miniature: the protocol reads whatever the lists hold


def write_release(root: Path, task: str, classes: int) -> Path:
    """`<root>/<task>/{train800,val200,train800val200,test}.txt` and `images/<split>/000000.jpg`, as NOAH writes
    them; train800val200 lists val200 first, so a reader that re-derives it instead of reading it is caught."""
    folder = root / task
    lines: dict[str, list[str]] = {}
    for split, count in SIZES.items():
        (folder / "images" / split).mkdir(parents=True)
        lines[split] = []
        for i in range(count):
            label = (i * 7 + len(split)) % classes
            colour = tuple(int(c) for c in np.random.default_rng([label]).integers(0, 255, 3))
            Image.new("RGB", (24, 20), colour).save(folder / "images" / split / f"{i:06d}.jpg", quality=95)
            lines[split].append(f"images/{split}/{i:06d}.jpg {label}")
    lines["train800val200"] = lines["val200"] + lines["train800"]
    for name, rows in lines.items():
        (folder / f"{name}.txt").write_text("\n".join(rows) + "\n")
    return folder


def test_transfer_runs_the_protocol_on_the_release_splits(tmp_path):
    folder = write_release(tmp_path / "vtab-1k", "dtd", 47)
    splits = open_task(get_task("vtab/dtd"), shots=20, data_dir=str(folder))
    assert (len(splits.train), len(splits.val), len(splits.test)) == (16, 4, 8)  # the lists, nothing carved
    assert splits.train.labels().tolist() == [(i * 7 + 8) % 47 for i in range(16)]  # labels from train800.txt
    assert [Path(p).name for p in splits.train_val.paths[:2]] == ["000000.jpg", "000001.jpg"]
    assert Path(splits.train_val.paths[0]).parent.name == "val200"  # train800val200.txt, in its own order

    out = tmp_path / "out"
    res = vitx_cli("transfer", "--task", "vtab/dtd", "--data-dir", str(folder), "--from", "scratch", "--model",
                   "vit-nano/4", "--shots", "20", "--batch-size", "4", "--lrs", "0.01", "--sweep-steps", "2",
                   "--workers", "0", "--output-dir", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads((out / "vtab-dtd" / "result.json").read_text())
    assert result["test_samples"] == 8 and result["num_classes"] == 47
    assert 0.0 <= result["test_top1"] <= 1.0 and len(result["sweep"]) == 1

    with pytest.raises(VitxError, match="needs 24 train and 6 validation images; the release's vtab/dtd lists hold 16"):
        open_task(get_task("vtab/dtd"), shots=30, data_dir=str(folder))
    fewer = open_task(get_task("vtab/dtd"), shots=10, data_dir=str(folder))  # the first N of each list
    assert (len(fewer.train), len(fewer.val)) == (8, 2) and fewer.release_train_val is None


def test_a_suite_finds_each_task_under_the_release_root(tmp_path):
    root = tmp_path / "vtab-1k"
    write_release(root, "oxford_iiit_pet", 37)  # vtab/pets, under the release's own folder name
    splits = open_task(get_task("vtab/pets"), shots=20, data_dir=str(root))
    assert len(splits.test) == 8 and splits.origin.endswith("oxford_iiit_pet")
    assert splits.source == "VTAB-1k folder release" and not splits.synthetic
    with pytest.raises(VitxError, match=r"does not hold vtab/dtd \(it holds neither tar shards"):
        open_task(get_task("vtab/dtd"), shots=20, data_dir=str(root))  # the root is not dtd's data
    assert open_task(get_task("vtab/dsprites_loc"), shots=20, data_dir=str(root)).origin == "embedded"  # still runs
    with pytest.raises(VitxError, match="is not a folder"):  # a --data-dir that is not there is said, not ignored
        open_task(get_task("vtab/dsprites_loc"), shots=20, data_dir=str(tmp_path / "typo"))


def test_a_suite_chooses_one_point_on_the_mean_val_and_task_per_task(tmp_path):
    """The paper's selection (Appendix B.1.1) on two release tasks: --select suite trains both with the point of
    the best mean val top-1 and writes the table it chose from; --select task gives each task its own best. Both
    record the selection in result.json and summary.json."""
    root = tmp_path / "vtab-1k"
    write_release(root, "dtd", 47)
    write_release(root, "oxford_iiit_pet", 37)
    common = ("--task", "vtab/dtd,vtab/pets", "--data-dir", str(root), "--from", "scratch", "--model", "vit-nano/4",
              "--shots", "20", "--batch-size", "4", "--lrs", "0.001,0.3", "--sweep-steps", "3", "--workers", "0",
              "--no-curves")
    res = vitx_cli("transfer", *common, "--output-dir", str(tmp_path / "suite"))  # a suite: --select suite
    assert res.returncode == 0, res.stderr[-2000:]
    assert "chosen on the mean" in res.stdout and "mean" in res.stdout
    choice = json.loads((tmp_path / "suite" / "selection.json").read_text())
    rows = {(r["lr"], r["steps"]): r for r in choice["table"]}
    assert set(rows) == {(0.001, 3), (0.3, 3)} and choice["tasks"] == ["vtab/dtd", "vtab/pets"]
    for row in rows.values():
        assert row["mean_val_top1"] == pytest.approx(sum(row["val_top1"].values()) / 2)
    assert rows[(choice["lr"], choice["steps"])]["mean_val_top1"] == max(r["mean_val_top1"] for r in rows.values())
    results = [json.loads((tmp_path / "suite" / f"vtab-{t}" / "result.json").read_text()) for t in ("dtd", "pets")]
    assert {(r["selection"], r["select"]) for r in results} == {("suite", "suite")}
    assert [r["chosen"] for r in results] == [{"lr": choice["lr"], "steps": choice["steps"]}] * 2
    for r in results:  # each task's own sweep is kept as it was measured
        assert {(p["lr"], p["val_top1"]) for p in r["sweep"]} == {(lr, rows[(lr, 3)]["val_top1"][r["task"]])
                                                                    for lr in (0.001, 0.3)}
    assert json.loads((tmp_path / "suite" / "summary.json").read_text())["selection"]["lr"] == choice["lr"]

    res = vitx_cli("transfer", *common, "--select", "task", "--output-dir", str(tmp_path / "task"))
    assert res.returncode == 0, res.stderr[-2000:]
    for t in ("dtd", "pets"):
        r = json.loads((tmp_path / "task" / f"vtab-{t}" / "result.json").read_text())
        best = max(r["sweep"], key=lambda p: p["val_top1"])
        assert r["selection"] == "task" and r["chosen"] == {"lr": best["lr"], "steps": best["steps"]}
    assert not (tmp_path / "task" / "selection.json").exists()
    res = vitx_cli("transfer", *common, "--select", "best", "--output-dir", str(tmp_path / "x"))
    assert res.returncode == 2 and "--select must be one of auto, suite, task" in res.stderr


def test_the_suite_choice_can_differ_from_every_task_s_own():
    """Per-task bests (a: lr 0.01, b: lr 0.1) and the suite's (lr 0.03: best on the mean) all differ."""
    from vitx.transfer.protocol import choose_for_suite

    def sweep(*vals):
        return [{"lr": lr, "steps": 500, "val_top1": v} for lr, v in zip((0.01, 0.03, 0.1), vals)]

    choice = choose_for_suite({"a": sweep(0.9, 0.8, 0.1), "b": sweep(0.1, 0.7, 0.8)})
    assert (choice["lr"], choice["steps"]) == (0.03, 500) and choice["mean_val_top1"] == pytest.approx(0.75)
    assert [r["mean_val_top1"] for r in choice["table"]] == pytest.approx([0.5, 0.75, 0.45])


@pytest.mark.parametrize("damage,match", [
    (lambda f: (f / "images" / "test" / "000003.jpg").unlink(), r"test\.txt: image .*000003\.jpg does not exist"),
    (lambda f: (f / "val200.txt").write_text("images/val200/000000.jpg\n"), r"val200\.txt:1: expected"),
    (lambda f: (f / "test.txt").write_text("images/test/000000.jpg 47\n"), r"test\.txt:1: label 47 is outside 0\.\.46"),
])
def test_a_damaged_release_is_named_in_one_line(tmp_path, damage, match):
    folder = write_release(tmp_path, "dtd", 47)
    damage(folder)
    with pytest.raises(VitxError, match=match):
        open_task(get_task("vtab/dtd"), shots=20, data_dir=str(folder))
