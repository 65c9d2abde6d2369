"""Few-shot linear evaluation: the closed-form solver against reference least squares, the shot sampler, and
accuracy on real data (scikit-learn digits) from a pre-trained checkpoint."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from vitx.data import Preprocess, open_source
from vitx.transfer import fit_least_squares, load_start, sample_shots
from vitx.evaluation.least_squares import evaluate_sources


@pytest.mark.parametrize("n,d,k,reg", [(50, 20, 5, 1024.0), (10, 64, 10, 3.0), (200, 8, 3, 1e-3)])
def test_solver_matches_reference_ridge(n, d, k, reg):
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 10, size=d) + rng.normal(size=d)
    y = rng.integers(0, k, n)
    head = fit_least_squares(x, y, k, reg)
    # reference: whiten with the train statistics, append the bias feature (100), ridge onto 2·one_hot − 1
    z = (x - x.mean(0)) / (x.std(0) + 1e-5)
    a = np.concatenate([z, np.full((n, 1), 100.0)], 1)
    target = 2 * np.eye(k)[y] - 1
    ridge = Ridge(alpha=reg, fit_intercept=False, solver="svd").fit(a, target)
    np.testing.assert_allclose(head.weight, ridge.coef_.T, rtol=0, atol=1e-5)
    x_test = rng.normal(size=(30, d))
    z_test = (x_test - x.mean(0)) / (x.std(0) + 1e-5)
    ref_logits = np.concatenate([z_test, np.full((30, 1), 100.0)], 1) @ ridge.coef_.T
    np.testing.assert_allclose(head.logits(x_test), ref_logits, rtol=0, atol=1e-5)


def test_small_regularisation_interpolates_separable_targets():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 40)), np.arange(12) % 4
    head = fit_least_squares(x, y, 4, reg=1e-8)
    np.testing.assert_allclose(head.logits(x), 2 * np.eye(4)[y] - 1, atol=1e-4)  # N < D: exact fit
    assert (head.predict(x) == y).all()


def test_shots_are_per_class_seeded_and_nested():
    labels = np.repeat(np.arange(5), 40)
    one, five = sample_shots(labels, 1, 0, 5), sample_shots(labels, 5, 0, 5)
    assert np.bincount(labels[five], minlength=5).tolist() == [5] * 5
    assert set(one) <= set(five)  # the same seed's 1-shot draw is part of its 5-shot draw, as in big_vision
    assert not np.array_equal(five, sample_shots(labels, 5, 1, 5))
    np.testing.assert_array_equal(five, sample_shots(labels, 5, 0, 5))


def test_fewshot_on_digits_from_a_pretrained_checkpoint(pretrained_run):
    """Train-split features of a checkpoint pre-trained on digits' train split; evaluated on the test split."""
    backbone = load_start(str(pretrained_run))
    pre = Preprocess(image_size=16)
    train = open_source("embedded:digits", "train", image_size=16)
    test = open_source("embedded:digits", "test", image_size=16)
    result = evaluate_sources(backbone, train, test, pre, shots=(1, 10), seeds=(0, 1), reg=2.0 ** 10)
    ten = result["shots"]["10"]["mean"]
    assert result["test_samples"] == 360 and result["num_classes"] == 10
    assert ten > 0.5, result  # chance is 0.10; from random initialisation about 0.42
    assert result["shots"]["1"]["mean"] > 0.35, result
    # the needed train images are decoded a chunk at a time (memory at ImageNet scale): the same numbers
    chunked = evaluate_sources(backbone, train, test, pre, shots=(1, 10), seeds=(0, 1), reg=2.0 ** 10, chunk=7)
    assert chunked["shots"] == result["shots"]


def test_fewshot_reads_pre_logits_of_a_supervised_run(pretrained_run, mpp_run, tmp_path):
    """The paper's few-shot features: after the supervised head's tanh layer; `--features cls-token` takes the
    [class] token instead; a run without that layer (MPP) reads its backbone either way. Reports say which."""
    import json

    import torch

    from .helpers import vitx_cli
    from vitx.runs.start import representation

    backbone = load_start(str(pretrained_run)).eval()
    feats = representation(backbone, str(pretrained_run))
    heads = __import__("safetensors.torch", fromlist=["load_file"]).load_file(str(pretrained_run / "heads.safetensors"))
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        expected = torch.tanh(backbone(x) @ heads["head.pre_logits.fc.weight"].T + heads["head.pre_logits.fc.bias"])
        torch.testing.assert_close(feats(x), expected)  # (4, 64), in (-1, 1)
    assert feats.kind.startswith("pre-logits")
    assert representation(load_start(str(mpp_run)), str(mpp_run)).layer is None
    # the default features follow the start: what its objective trained, recorded in its config.json
    from vitx.runs.start import start_features

    assert json.loads((mpp_run / "config.json").read_text())["features"] == "patch-mean"
    assert start_features(str(mpp_run)) == "patch-mean" and start_features(str(pretrained_run)) == "pre-logits"
    assert representation(load_start(str(mpp_run)), str(mpp_run)).kind.startswith("patch-mean")
    older = tmp_path / "older"  # a run saved before the record: its objective's declaration decides
    older.mkdir()
    config = json.loads((mpp_run / "config.json").read_text())
    del config["features"]
    (older / "config.json").write_text(json.dumps(config))
    assert start_features(str(older)) == "patch-mean" and start_features("scratch") == "pre-logits"
    mean = representation(backbone, str(pretrained_run), "patch-mean")  # what masked modelling trains
    with torch.no_grad():
        torch.testing.assert_close(mean(x), backbone.forward_features(x)[:, 1:].mean(1))  # (4, 64): 16 patches
    assert mean.kind.startswith("patch-mean")

    numbers = {}
    for which in ("pre-logits", "cls-token"):
        out = tmp_path / f"{which}.json"
        proc = vitx_cli("eval", "fewshot", "--from", str(pretrained_run), "--shots", "10", "--seeds", "2",
                        "--features", which, "--output", str(out))
        assert proc.returncode == 0, proc.stderr
        numbers[which] = json.loads(out.read_text())
        assert numbers[which]["features"].startswith(which)
        assert numbers[which]["shots"]["10"]["mean"] > 0.5  # chance 0.10
    assert numbers["pre-logits"]["shots"] != numbers["cls-token"]["shots"]  # different features, different heads
    bad = vitx_cli("eval", "fewshot", "--from", str(pretrained_run), "--features", "logits")
    assert bad.returncode != 0 and "--features" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("args,needle", [
    (["--shots", "1,abc"], "--shots takes comma-separated whole numbers, e.g. --shots 1,5,10,25; got '1,abc'"),
    (["--shots", "0"], "--shots are images per class and must be positive, got 0"),
    (["--reg", "-1"], "--reg must be positive (the paper's is 1024), got -1"),
    (["--reg", "nan"], "--reg must be a finite number, got nan"),
    (["--image-size", "0"], "--image-size must be positive, got 0"),
    (["--test-samples", "-5"], "--test-samples must not be negative, got -5"),
])
def test_fewshot_options_are_checked_in_one_line(args, needle, tmp_path):
    """A negative or nan regulariser printed a table (12.5% for an all-nan head); a bad --shots crashed inside
    its own error message."""
    from .helpers import vitx_cli

    result = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4",
                      "--output", str(tmp_path / "out.json"), *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == f"error: {needle}"
    assert not (tmp_path / "out.json").exists()


def test_fewshot_on_a_one_class_folder_says_so(tmp_path):
    from PIL import Image

    from .helpers import vitx_cli

    for split in ("train", "test"):
        (tmp_path / "one" / split / "cat").mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (16, 16), (i * 40, 0, 0)).save(tmp_path / "one" / split / "cat" / f"{i}.png")
    result = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--shots", "1",
                      "--data", str(tmp_path / "one"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().endswith("one has one class (cat); a classifier needs two or more")



def test_fewshot_evaluates_several_datasets_in_one_call(tmp_path):
    """`--data a,b`: one table and one result per dataset (commas inside options stay with their spec)."""
    import json

    from vitx.spec import split_specs

    from .helpers import vitx_cli

    assert split_specs("embedded:digits(length=300, eval_length=20),hf:a/b, x") == [
        "embedded:digits(length=300, eval_length=20)", "hf:a/b", "x"]
    assert split_specs("shards/train-{a,b}.tar,x") == ["shards/train-{a,b}.tar", "x"]  # a shard pattern stays whole
    result = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--shots", "1", "--seeds", "1",
                      "--data", "embedded:digits,embedded:shapes(length=200)", "--test-samples", "50",
                      "--output", str(tmp_path / "both.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    both = json.loads((tmp_path / "both.json").read_text())
    assert [d["data"] for d in both["datasets"]] == ["embedded:digits", "embedded:shapes(length=200)"]
    assert all(d["test_samples"] == 50 and d["num_classes"] == 10 for d in both["datasets"])
    assert result.stdout.count("few-shot linear evaluation") == 2
    again = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--shots", "1", "--draws", "1",
                     "--data", "embedded:digits,embedded:shapes(length=200)", "--test-samples", "50",
                     "--output", str(tmp_path / "draws.json"))  # --draws: the count's own name; --seeds its former
    assert again.returncode == 0 and json.loads((tmp_path / "draws.json").read_text()) == both
    late = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--shots", "1", "--seeds", "1",
                    "--data", f"embedded:digits,{tmp_path / 'missing'}", "--test-samples", "50")
    assert late.returncode == 2 and "few-shot linear evaluation" not in late.stdout  # refused before the first ran
    assert len(late.stderr.strip().splitlines()) == 1 and "missing" in late.stderr, late.stderr
    from PIL import Image

    for split in ("train", "test"):  # 3 images of each of 2 classes: too few for 5 shots, said before any table
        for name in ("cat", "dog"):
            (tmp_path / "few" / split / name).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (16, 16), (i * 40, 90 if name == "dog" else 0, 0)).save(
                    tmp_path / "few" / split / name / f"{i}.png")
    short = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--shots", "1,5", "--seeds", "1",
                     "--data", f"embedded:digits,{tmp_path / 'few'}", "--test-samples", "50")
    assert short.returncode == 2 and "few-shot linear evaluation" not in short.stdout
    assert short.stderr.strip() == (f"error: {tmp_path / 'few'}: class 0 has only 3 training images (and 1 other "
                                    "classes); cannot take 5 shots"), short.stderr
    gone = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--shots", "1",
                    "--task", f"embedded/digits,{tmp_path / 'gone'}")  # a path given as a task, not there
    assert (gone.returncode, gone.stderr.strip()) == (2, f"error: --task {tmp_path / 'gone'}: no such file or folder "
                                                         "(and not a registered task: see `vitx tasks`)")


def test_big_vision_geometry_resizes_the_short_side_then_crops_the_centre(tmp_path):
    """--preprocess big_vision: the short side to S·256/224 (aspect kept), then a centre crop of S, so a frame
    of 1/16 of the side is cut away and nothing is squashed."""
    import torch

    from vitx.data import Preprocess

    pre = Preprocess(image_size=28, eval_resize="big_vision")
    image = torch.zeros(3, 64, 128, dtype=torch.uint8)
    image[0] = 200  # red everywhere ...
    image[:, 4:60, 4:124] = torch.tensor([10, 150, 30], dtype=torch.uint8)[:, None, None]  # ... but a 4-px frame
    out = pre.eval(image)  # 64×128 → 32×64 → the centre 28×28
    assert out.shape == (3, 28, 28) and out.dtype == torch.uint8
    assert out[:, 0, 14].tolist() == [10, 150, 30] and out[:, 27, 14].tolist() == [10, 150, 30]  # frame cut off
    assert (out == torch.tensor([10, 150, 30], dtype=torch.uint8)[:, None, None]).all()
    square = pre.eval(torch.full((3, 100, 100), 7, dtype=torch.uint8))
    assert square.shape == (3, 28, 28) and int(square.float().mean()) == 7
    from .helpers import vitx_cli

    res = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--shots", "1", "--seeds", "1",
                   "--data", "embedded:digits", "--test-samples", "20", "--preprocess", "big_vision",
                   "--output", str(tmp_path / "bv.json"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((tmp_path / "bv.json").read_text())["input"]["eval_resize"] == "big_vision"
    bad = vitx_cli("eval", "fewshot", "--from", "scratch", "--model", "vit-nano/4", "--preprocess", "tf")
    assert bad.returncode == 2 and "--preprocess must be one of start, big_vision, got 'tf'" in bad.stderr


def test_a_label_less_sources_labels_are_read_once_however_often_asked():
    """A plugin's source without `labels()` gives its labels only by loading each image: `source_labels`, which
    few-shot's check and its evaluation both call, loads them once (a read-only array after), and a source that
    cannot keep them still reads them right."""
    from vitx.data.sources import source_labels

    class Loads:
        num_classes, class_names = 3, None

        def __init__(self):
            self.loads = 0

        def __len__(self):
            return 12

        def load(self, i):
            self.loads += 1
            return None, i % 3

    source = Loads()
    first, again = source_labels(source), source_labels(source)
    assert source.loads == 12 and again is first and first.tolist() == [i % 3 for i in range(12)]
    with pytest.raises(ValueError):
        first[0] = 2  # kept read-only: no caller can change what the next one reads

    class Slotted:  # no __dict__: nowhere to keep them
        __slots__ = ("loads",)
        num_classes, class_names = 3, None
        __len__, load = Loads.__len__, Loads.load

    slotted = Slotted()
    slotted.loads = 0
    assert source_labels(slotted).tolist() == first.tolist() == source_labels(slotted).tolist()
    assert slotted.loads == 24
