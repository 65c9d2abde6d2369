"""The VTAB-1k task registry: 19 tasks with task_adaptation's groups, classes and label binning; the embedded
dSprites; N-shot splits; and a local copy in the hub's WebDataset format read through the online code path."""
from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from PIL import Image

from .helpers import saved_model_accuracy, vitx_cli
from vitx.data import decode
from vitx.errors import VitxError
from vitx.registry import TASKS
from vitx.tasks import get_task, open_task, select_tasks
from vitx.tasks.dsprites import FACTORS, TOTAL, DSprites, factors_of

CLASSES = {"caltech101": 102, "cifar100": 100, "dtd": 47, "flowers102": 102, "pets": 37, "svhn": 10, "sun397": 397,
           "camelyon": 2, "eurosat": 10, "resisc45": 45, "retinopathy": 5, "clevr_count": 8, "clevr_dist": 6,
           "dmlab": 6, "kitti_dist": 4, "dsprites_loc": 16, "dsprites_ori": 16, "smallnorb_azi": 18,
           "smallnorb_ele": 9}


def test_registry_has_the_19_tasks_with_their_groups_and_classes():
    names = TASKS.names("vtab/*")
    assert sorted(names) == sorted(f"vtab/{n}" for n in CLASSES)
    for name, k in CLASSES.items():
        assert get_task(f"vtab/{name}").num_classes == k, name
    assert [len(select_tasks(f"vtab/{g}")) for g in ("natural", "specialized", "structured")] == [7, 4, 8]
    assert len(select_tasks("vtab/all")) == 19 and len(select_tasks("vtab/dsprites_*")) == 2
    with pytest.raises(VitxError, match="did you mean vtab/dtd"):
        get_task("vtab/dtdd")


def test_dsprites_hub_labels_are_binned_like_task_adaptation():
    loc, ori = get_task("vtab/dsprites_loc").hub_label, get_task("vtab/dsprites_ori").hub_label
    assert [loc(v) for v in (0, 1, 2, 3, 30, 31)] == [0, 0, 1, 1, 15, 15]  # 32 positions // 2
    assert [ori(v) for v in (0, 2, 3, 4, 5, 37, 38, 39)] == [0, 0, 1, 1, 2, 14, 15, 15]  # floor(v / 2.5)
    assert sorted({ori(v) for v in range(40)}) == list(range(16))


def test_embedded_dsprites_covers_the_factor_grid_with_vtab_splits():
    assert TOTAL == 737_280 and [FACTORS[k] for k in FACTORS] == [3, 6, 40, 32, 32]
    train, val, test = (DSprites(s) for s in ("train", "val", "test"))
    assert (len(train), len(val), len(test)) == (589_824, 73_728, 73_728)
    records = {train.record(i) for i in range(0, len(train), 997)} | {test.record(i) for i in range(0, 73_728, 97)}
    assert all(0 <= r < TOTAL for r in records)
    assert factors_of(TOTAL - 1) == {"shape": 2, "scale": 5, "orientation": 39, "x_position": 31, "y_position": 31}
    labels = train.labels()
    for i in (0, 1, 12345):
        img, label = train.load(i)
        assert label == labels[i] == factors_of(train.record(i))["x_position"] // 2
        arr = np.asarray(img)
        assert arr.shape == (64, 64, 3) and set(np.unique(arr)) <= {0, 255} and arr.max() == 255
    ori = DSprites("train", factor="orientation")
    assert ori.load(5)[1] == int(factors_of(ori.record(5))["orientation"] // 2.5)
    # the shape moves with x: the centre of mass follows the label
    xs = [np.asarray(DSprites("test").load(i)[0])[..., 0].nonzero()[1].mean() for i in range(40)]
    lbl = [DSprites("test").load(i)[1] for i in range(40)]
    assert np.corrcoef(xs, lbl)[0, 1] > 0.99


def test_n_shot_splits():
    splits = open_task(get_task("vtab/dsprites_loc"), 1000)
    assert (len(splits.train), len(splits.val), len(splits.train_val), len(splits.test)) == (800, 200, 1000, 73_728)
    np.testing.assert_array_equal(splits.train.indices, np.arange(800))  # train800 = train[:800]
    np.testing.assert_array_equal(splits.val.indices, np.arange(200))  # val200 = val[:200]
    with pytest.raises(VitxError, match="--shots 1000000 needs 800000 train"):
        open_task(get_task("vtab/dsprites_loc"), 1_000_000)
    with pytest.raises(VitxError, match="hf download clip-benchmark/wds_vtab-dtd --repo-type dataset --local-dir DIR"):
        open_task(get_task("vtab/dtd"), 1000, offline=True)


def _shard(path, samples):
    with tarfile.open(path, "w") as tar:
        for key, img, label in samples:
            for ext, data in (("webp", _webp(img)), ("cls", str(label).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def _webp(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="WEBP", lossless=True)
    return buf.getvalue()


@pytest.fixture()
def hub_copy(tmp_path):
    """A tiny copy of clip-benchmark/wds_vtab-dsprites_label_x_position: raw x-position labels (0..31), WebP."""
    root = tmp_path / "wds_vtab-dsprites_label_x_position"
    source = DSprites("train")
    for split, (lo, n) in {"train": (0, 60), "test": (60, 40)}.items():
        (root / split).mkdir(parents=True)
        samples = []
        for i in range(lo, lo + n):
            img, _ = source.load(i)
            raw_x = factors_of(source.record(i))["x_position"]
            samples.append((f"s{i - lo:07d}", img, raw_x))
        half = len(samples) // 2
        _shard(root / split / "0.tar", samples[:half])
        _shard(root / split / "1.tar", samples[half:])
        (root / split / "nshards.txt").write_text("2\n")
    (root / "classnames.txt").write_text("\n".join(str(i) for i in range(32)) + "\n")
    return root


def test_hub_format_copy_through_the_online_code_path(hub_copy):
    splits = open_task(get_task("vtab/dsprites_loc"), 20, data_dir=str(hub_copy))
    assert (len(splits.train), len(splits.val), len(splits.test)) == (16, 4, 40)
    assert set(splits.val.indices) <= set(range(16, 60))  # no validation split in hub copies: carved from train
    expected = DSprites("train").labels()[:16]
    np.testing.assert_array_equal(splits.train.labels(), expected)  # raw hub labels binned to VTAB's 16
    img, label = splits.test.load(3)
    assert decode(img).shape == (3, 64, 64) and label == DSprites("train").labels()[63]


def test_transfer_protocol_on_a_hub_format_copy(hub_copy, tmp_path):
    out = tmp_path / "out"
    proc = vitx_cli("transfer", "--task", "vtab/dsprites_loc", "--data-dir", str(hub_copy), "--from", "scratch",
                    "--model", "vit-nano/4", "--image-size", "16", "--shots", "20", "--batch-size", "8",
                    "--lrs", "0.01,0.03", "--sweep-steps", "3", "--workers", "0", "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "vtab-dsprites_loc" / "result.json").read_text())
    assert [(p["lr"], p["steps"]) for p in result["sweep"]] == [(0.01, 3), (0.03, 3)]
    best = max(result["sweep"], key=lambda p: p["val_top1"])
    assert result["chosen"] == {"lr": best["lr"], "steps": 3}
    assert result["test_samples"] == 40
    final = out / "vtab-dsprites_loc" / "final"  # the reported number is the saved model's, on the copy's test split
    assert result["test_top1"] == pytest.approx(
        saved_model_accuracy(final, "vtab/dsprites_loc", 40, data_dir=str(hub_copy)), abs=1e-6)
    assert "test top-1" in proc.stdout + proc.stderr


# task_adaptation's few-shot split strings per task (task_adaptation/data/<module>.py at d7630d3, read task by
# task) and the sizes of its train / val / test its tests expect (<module>_test.py): what ta_splits must give
TASK_ADAPTATION = {
    "caltech101": ("train[:800]", "train[2754:2954]", "test[:6084]", (2754, 306, 6084)),
    "cifar100": ("train[:800]", "train[45000:45200]", "test[:10000]", (45000, 5000, 10000)),
    "dtd": ("train[:800]", "validation[:200]", "test[:1880]", (1880, 1880, 1880)),
    "flowers102": ("train[:800]", "validation[:200]", "test[:6149]", (1020, 1020, 6149)),
    "pets": ("train[:800]", "train[2944:3144]", "test[:3669]", (2944, 736, 3669)),
    "svhn": ("train[:800]", "train[65931:66131]", "test[:26032]", (65931, 7326, 26032)),
    "sun397": ("train[:800]", "validation[:200]", "test[:21750]", (76128, 10875, 21750)),
    "camelyon": ("train[:800]", "validation[:200]", "test[:32768]", (262144, 32768, 32768)),
    "eurosat": ("train[:800]", "train[16200:16400]", "train[21600:27000]", (16200, 5400, 5400)),
    "resisc45": ("train[:800]", "train[18900:19100]", "train[25200:31500]", (18900, 6300, 6300)),
    "retinopathy": ("train[:800]", "validation[:200]", "test[:42670]", (35126, 10906, 42670)),
    "clevr_count": ("train[:800]", "train[63000:63200]", "validation[:15000]", (63000, 7000, 15000)),
    "clevr_dist": ("train[:800]", "train[63000:63200]", "validation[:15000]", (63000, 7000, 15000)),
    "dmlab": ("train[:800]", "validation[:200]", "test[:22735]", (65550, 22628, 22735)),
    "kitti_dist": ("train[:800]", "validation[:200]", "test[:711]", (6347, 423, 711)),
    "dsprites_loc": ("train[:800]", "train[589824:590024]", "train[663552:737280]", (589824, 73728, 73728)),
    "dsprites_ori": ("train[:800]", "train[589824:590024]", "train[663552:737280]", (589824, 73728, 73728)),
    "smallnorb_azi": ("train[:800]", "test[:200]", "test[12150:24300]", (24300, 12150, 12150)),
    "smallnorb_ele": ("train[:800]", "test[:200]", "test[12150:24300]", (24300, 12150, 12150)),
}


def test_ta_splits_are_task_adaptation_s_definitions_for_all_19_tasks():
    from vitx.tasks.ta_splits import TFDS_SIZES, few_shot, splits

    assert sorted(TASK_ADAPTATION) == sorted(CLASSES)
    for task, (train800, val200, test, counts) in TASK_ADAPTATION.items():
        cut = few_shot(task, TFDS_SIZES[task])
        assert (str(cut["train"]), str(cut["val"]), str(cut["test"])) == (train800, val200, test), task
        assert tuple(len(s) for s in splits(task, TFDS_SIZES[task]).values()) == counts, task
    with pytest.raises(VitxError, match=r"6000 images are asked of train\[16200:21600\], which holds 5400"):
        few_shot("eurosat", TFDS_SIZES["eurosat"], 16000, 6000)  # never into another split's images


def _write_copy(root, sizes: dict[str, int], classes: int):
    """A copy in the hub's WebDataset layout with these split sizes; image i of a split is a grey level that
    names (split, i), so the test can see which images were taken."""
    for split, n in sizes.items():
        (root / split).mkdir(parents=True)
        tone = {"train": 0, "validation": 100, "test": 200}[split]
        _shard(root / split / "0.tar", [(f"s{i:07d}", Image.new("RGB", (8, 8), (tone + i,) * 3), i % classes)
                                        for i in range(n)])
    return root


def _taken(source) -> list[tuple[str, int]]:
    tone = [int(decode(source.load(i)[0])[0, 0, 0]) for i in range(len(source))]
    return [({0: "train", 1: "validation", 2: "test"}[t // 100], t % 100) for t in tone]


@pytest.mark.parametrize("task,sizes,train,val,test", [
    # tfds-val (dtd): train, validation and test as they are
    ("dtd", {"train": 20, "validation": 12, "test": 10}, ("train", 0, 16), ("validation", 0, 4), ("test", 0, 10)),
    # carve-val 80% (pets): val from train[40:]
    ("pets", {"train": 50, "test": 10}, ("train", 0, 16), ("train", 40, 44), ("test", 0, 10)),
    # carve-val-test 60/20 (eurosat): val and test from train
    ("eurosat", {"train": 50}, ("train", 0, 16), ("train", 30, 34), ("train", 40, 50)),
    # val-from-test 50% (smallnorb): val = test[:50%], test = test[50%:]
    ("smallnorb_azi", {"train": 30, "test": 20}, ("train", 0, 16), ("test", 0, 4), ("test", 10, 20)),
])
def test_a_copy_of_the_tfds_splits_is_cut_by_the_task_s_own_rule(tmp_path, monkeypatch, task, sizes, train, val,
                                                                  test):
    """Per rule family, a small copy of the TFDS splits (the real sizes, here shrunk so that the copy is small):
    the images taken for train / val / test are task_adaptation's, and the result records the definition."""
    from vitx.tasks import ta_splits

    monkeypatch.setitem(ta_splits.TFDS_SIZES, task, sizes)
    copy = _write_copy(tmp_path / task, sizes, CLASSES[task])
    splits = open_task(get_task(f"vtab/{task}"), 20, data_dir=str(copy))
    for source, (split, lo, hi) in ((splits.train, train), (splits.val, val), (splits.test, test)):
        assert _taken(source) == [(split, i) for i in range(lo, hi)]
    assert splits.record["exact"] and splits.record["copy"] == "the TFDS splits"
    assert splits.record["val"] == (f"{val[0]}[{val[1] or ''}:{val[2]}]")


def test_a_copy_of_task_adaptation_s_splits_is_read_as_it_is_and_a_missing_val_is_said(tmp_path):
    """The clip-benchmark layout holds task_adaptation's train / val / test themselves: the first N of each.
    Without a validation split, val200 cannot be task_adaptation's; it is drawn from train and the record
    says so, pointing to the folder release."""
    with_val = open_task(get_task("vtab/pets"), 20,
                         data_dir=str(_write_copy(tmp_path / "a", {"train": 30, "validation": 9, "test": 7}, 37)))
    assert _taken(with_val.val) == [("validation", i) for i in range(4)] and with_val.record["exact"]
    assert _taken(with_val.train) == [("train", i) for i in range(16)] and len(with_val.test) == 7
    without = open_task(get_task("vtab/pets"), 20, data_dir=str(_write_copy(tmp_path / "b", {"train": 30, "test": 7}, 37)))
    assert not without.record["exact"] and "val4 is NOT" in without.record["definition"]
    assert "folder release" in without.record["definition"]
    assert {s for s, _ in _taken(without.val)} == {"train"} and min(i for _, i in _taken(without.val)) >= 16


def test_online_dsprites_comes_from_its_hub_copy_and_falls_back_to_the_regeneration(monkeypatch, hub_copy):
    """Online, vtab/dsprites_loc reads clip-benchmark's copy (here a local one standing in for the hub); when the
    hub cannot be reached, the embedded regeneration, labelled synthetic."""
    from vitx.tasks import hub, splits

    asked = []

    def from_hub(repo, task, data_dir):
        asked.append(repo)
        return hub.open_hub_splits(repo, task, str(hub_copy))

    monkeypatch.setattr(splits, "open_hub_splits", from_hub)
    online = open_task(get_task("vtab/dsprites_loc"), 20, offline=False)
    assert asked == ["clip-benchmark/wds_vtab-dsprites_label_x_position"] and not online.synthetic
    assert online.source.startswith("hub copy") and len(online.test) == 40

    def unreachable(repo, task, data_dir):
        raise VitxError("cannot load it from the Hugging Face hub")

    monkeypatch.setattr(splits, "open_hub_splits", unreachable)
    fallback = open_task(get_task("vtab/dsprites_loc"), 20, offline=False)
    assert fallback.synthetic and fallback.origin == "embedded"
    assert open_task(get_task("vtab/dsprites_loc"), 20, offline=True).origin == "embedded"


def test_one_data_folder_spelled_several_ways_is_one_task(tmp_path, monkeypatch):
    """`d,d/,./d` and its absolute path ran three times and counted three times in the suite's mean."""
    from .helpers import write_image_folder

    write_image_folder(tmp_path / "d")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    monkeypatch.chdir(tmp_path)
    tasks = select_tasks(f"d,d/,./d,{tmp_path / 'd'},link,vtab/dtd,vtab/dtd")
    assert [t.name for t in tasks] == ["d", "vtab/dtd"]
