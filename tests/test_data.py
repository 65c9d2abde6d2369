"""The data layer: embedded sources, local folders in `datasets` formats, transforms, the sample stream."""
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from vitx.data import (Batches, DeadLeaves, EncodedImage, Preprocess, Shapes, StreamSampler, TensorSplit, decode,
                       open_source)
from vitx.data.loader import eval_loader, iterate, train_loader
from vitx.errors import CorruptImageError, VitxError

from .helpers import write_image_folder


def test_embedded_sources_are_deterministic_at_any_size():
    for cls in (DeadLeaves, Shapes):
        a = np.asarray(cls(size=48, seed=3).load(7)[0])
        b = np.asarray(cls(size=48, seed=3).load(7)[0])
        c = np.asarray(cls(size=48, seed=3).load(8)[0])
        d = np.asarray(cls(size=48, seed=4).load(7)[0])
        assert a.shape == (48, 48, 3) and np.array_equal(a, b)
        assert not np.array_equal(a, c) and not np.array_equal(a, d)
    assert DeadLeaves(size=96).load(0)[0].size == (96, 96)


def test_dead_leaves_statistics_are_natural_like():
    """Natural images have a power spectrum falling roughly as 1/f^2 (slope about -2 in log-log)."""
    imgs = [np.asarray(DeadLeaves(size=128).load(i)[0].convert("L"), dtype=np.float64) for i in range(16)]
    power = np.mean([np.abs(np.fft.fftshift(np.fft.fft2(x - x.mean()))) ** 2 for x in imgs], axis=0)
    yy, xx = np.indices(power.shape)
    radius = np.hypot(yy - 64, xx - 64).astype(int)
    radial = np.bincount(radius.ravel(), power.ravel()) / np.bincount(radius.ravel())
    f = np.arange(4, 48)
    slope = np.polyfit(np.log(f), np.log(radial[f]), 1)[0]
    assert -3.2 < slope < -1.4, slope
    colours = np.asarray(DeadLeaves(size=64).load(0)[0]).reshape(-1, 3)
    assert len(np.unique(colours, axis=0)) > 20  # colour-rich


def test_shapes_are_balanced_and_labelled():
    src = Shapes(size=32, length=100)
    labels = [src.load(i)[1] for i in range(100)]
    assert np.bincount(labels).tolist() == [10] * 10
    assert src.num_classes == 10 and src.class_names[0] == "circle"


def test_train_val_splits_differ():
    a = open_source("embedded:shapes", "train", image_size=32).load(0)[0]
    b = open_source("embedded:shapes", "validation", image_size=32).load(0)[0]
    assert not np.array_equal(np.asarray(a), np.asarray(b))


def test_digits_real_images():
    pytest.importorskip("sklearn")
    train = open_source("embedded:digits", "train", image_size=32)
    val = open_source("embedded:digits", "validation", image_size=32)
    assert len(train) + len(val) == 1797 and train.num_classes == 10
    img, label = train.load(0)
    assert img.size == (32, 32) and 0 <= label < 10
    few = open_source("embedded:digits(length=300)", "train", image_size=32)  # the first 300 of the same split
    few_val = open_source("embedded:digits(length=300)", "validation", image_size=32)
    assert len(few) == 300 and np.array_equal(few.labels(), train.labels()[:300]) and len(few_val) == len(val)
    assert np.array_equal(np.asarray(few.load(299)[0]), np.asarray(train.load(299)[0]))


def test_transforms_are_seeded_per_sample_and_stay_uint8():
    pre = Preprocess(image_size=24)
    img = decode(Shapes(size=40).load(0)[0])  # (3, 40, 40) uint8
    a = pre.train(img, np.random.default_rng([0, 5]))
    b = pre.train(img, np.random.default_rng([0, 5]))
    c = pre.train(img, np.random.default_rng([0, 6]))
    assert a.shape == (3, 24, 24) and a.dtype == torch.uint8 and torch.equal(a, b) and not torch.equal(a, c)
    e = pre.eval(img)
    assert e.shape == (3, 24, 24) and e.dtype == torch.uint8
    x = pre.normalise(e[None])  # on the device, in the runner
    assert x.dtype == torch.float32 and -1.0 <= x.min() and x.max() <= 1.0  # mean/std 0.5 → [-1, 1]
    assert torch.allclose(x[0, :, 3, 5], (e[:, 3, 5].float() / 255 - 0.5) / 0.5)
    flat = Preprocess(image_size=24, augment=False)  # transfer: training sees the eval transform
    assert torch.equal(Batches(Shapes(size=40), flat, seed=0).__getitems__([(0, 9)])["image"][0], flat.eval(img))


def test_jpeg_decodes_like_pil_and_crops_like_the_box(tmp_path):
    """torchvision's libjpeg-turbo decode agrees with PIL's; the eval crop is the centre square, resized."""
    rng = np.random.default_rng(0)
    picture = (rng.random((30, 40, 3)) * 255).astype(np.uint8)
    Image.fromarray(picture).save(tmp_path / "a.jpg", quality=95)
    encoded = EncodedImage.from_file(str(tmp_path / "a.jpg"))
    ours = decode(encoded)  # (3, 30, 40)
    pil = torch.from_numpy(np.asarray(Image.open(tmp_path / "a.jpg").convert("RGB")).copy()).permute(2, 0, 1)
    assert ours.shape == (3, 30, 40) and (ours.int() - pil.int()).abs().max() <= 2
    same = Preprocess(image_size=30, eval_crop_pct=1.0).eval(ours)
    assert torch.equal(same, ours[:, :, 5:35])  # the centre 30×30, no resize needed
    with pytest.raises(CorruptImageError, match="cannot decode image half.jpg"):
        decode(EncodedImage((tmp_path / "a.jpg").read_bytes()[:200], "half.jpg"))


def test_a_16_bit_png_is_scaled_to_8_bits_not_wrapped(tmp_path):
    grey = np.array([[0, 500, 750, 65535]], dtype=np.uint16)  # wraps mod 256 to 0, 244, 238, 255
    Image.fromarray(grey).save(tmp_path / "deep.png")  # PIL writes 16-bit greyscale
    out = decode(EncodedImage.from_file(str(tmp_path / "deep.png")))
    assert out.dtype == torch.uint8 and out[0, 0].tolist() == [0, 1, 2, 255]


def test_deep_and_float_tiffs_decode_as_their_8_bit_png_does(tmp_path):
    """PIL's convert("RGB") clips 16-bit grey (a TIFF all but white) and float grey in [0, 1] (black): scaled as
    torchvision scales a 16-bit PNG instead, float in [0, 1] times 255; a range no scale fits is refused."""
    grey = (np.indices((16, 16)).sum(0) * 8).astype(np.uint8)  # (16, 16) 0 … 240
    Image.fromarray(grey).save(tmp_path / "g8.png")
    Image.fromarray(grey.astype(np.uint16) * 257).save(tmp_path / "g16.tif")
    Image.fromarray(grey.astype(np.float32) / 255).save(tmp_path / "float.tif")
    Image.fromarray(grey.astype(np.float32)).save(tmp_path / "float255.tif")
    want = decode(EncodedImage.from_file(str(tmp_path / "g8.png")))  # (3, 16, 16)
    for name in ("g16.tif", "float.tif"):
        assert torch.equal(decode(EncodedImage.from_file(str(tmp_path / name))), want), name
    assert torch.equal(decode(EncodedImage.from_file(str(tmp_path / "float255.tif"))), want)  # above 1: as PIL
    assert torch.equal(decode(Image.fromarray(grey.astype(np.int32) * 257)), want)  # "I": 16-bit, whatever its values
    assert torch.equal(decode(Image.fromarray(grey.astype(np.int32)))[0], torch.zeros(16, 16, dtype=torch.uint8))
    Image.fromarray(grey.astype(np.float32) * 100).save(tmp_path / "float_big.tif")
    with pytest.raises(CorruptImageError, match=r"float_big\.tif: a floating-point grey image with values in "
                                                r"\[0, 24000\]: its scale is unknown"):
        decode(EncodedImage.from_file(str(tmp_path / "float_big.tif")))
    with pytest.raises(CorruptImageError, match="a floating-point grey image"):  # a PIL image handed over as it is
        decode(Image.fromarray(grey.astype(np.float32) * 100))


def test_an_image_claiming_too_many_pixels_is_refused_before_decoding(tmp_path, monkeypatch):
    """The header's size is read first: torchvision has no decompression-bomb limit (a 50 KB PNG claiming
    20000×20000 took 1.9 GB in `vitx predict`). The limit is PIL's, lowered here to keep the test small."""
    Image.new("1", (200, 150)).save(tmp_path / "big.png")  # 30,000 pixels in a few hundred bytes
    encoded = EncodedImage.from_file(str(tmp_path / "big.png"))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 20_000)  # PIL only warns below twice its limit: we refuse
    with pytest.raises(CorruptImageError, match=r"big\.png is 200x150 pixels, more than the 20,000 pixels"):
        decode(encoded)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)  # above twice it, PIL's own open refuses it
    with pytest.raises(CorruptImageError, match=r"big\.png is 30,000 pixels, more than the 10,000 pixels"):
        decode(encoded)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 30_000)  # at the limit: decoded
    assert decode(encoded).shape == (3, 150, 200)


def test_an_unusable_torchvision_decoder_is_said_once_and_pil_decodes(tmp_path, monkeypatch, capsys):
    """torchvision 0.29 deprecates its decoders: under `python -W error` each call raises its
    DeprecationWarning. The decode falls back to PIL, and says so once per process; a damaged file says nothing
    of the kind (it is named by CorruptImageError)."""
    import warnings

    import torchvision.io

    from vitx.data import decoding

    real = torchvision.io.decode_image

    def deprecated(*args, **kwargs):  # as torchvision 0.29's decoders do, whatever the installed version
        warnings.warn("The image decoding capabilities of TorchVision are deprecated. Use TorchCodec",
                      DeprecationWarning)
        return real(*args, **kwargs)

    Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).save(tmp_path / "a.png")
    encoded = EncodedImage.from_file(str(tmp_path / "a.png"))
    broken = EncodedImage(b"\x89PNG\r\n\x1a\n not really", "broken.png")
    monkeypatch.setattr(decoding, "_torchvision_unusable", None)
    with pytest.raises(CorruptImageError, match="broken.png"):
        decode(broken)
    assert capsys.readouterr().err == ""  # a bad file is not the decoder's fault

    monkeypatch.setattr(torchvision.io, "decode_image", deprecated)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        images = [decode(encoded) for _ in range(3)]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: torchvision cannot decode images here")
    assert "DeprecationWarning: The image decoding capabilities" in lines[0] and "decoding with PIL" in lines[0]
    expected = torch.from_numpy(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).permute(2, 0, 1)
    assert all(torch.equal(image, expected) for image in images)


def test_batches_arrive_as_uint8_and_are_pinned_for_a_gpu():
    src = Shapes(size=20, length=64)
    pre = Preprocess(image_size=16)
    loader = train_loader(src, pre, global_micro_batch=8, rank=0, world=1, seed=0, start_micro_step=0, workers=1,
                          skip_corrupt=False, pin=False)
    batch = next(iter(loader))
    assert batch["image"].dtype == torch.uint8 and batch["image"].shape == (8, 3, 16, 16)
    assert batch["label"].shape == (8,) and batch["skipped"].sum() == 0
    ev = next(iter(eval_loader(src, pre, batch=5, rank=1, world=2, limit=11, workers=0, skip_corrupt=False)))
    assert ev["image"].dtype == torch.uint8 and ev["label"].tolist() == [src.load(i)[1] for i in (1, 3, 5, 7, 9)]
    pinned = train_loader(src, pre, global_micro_batch=8, rank=0, world=1, seed=0, start_micro_step=0, workers=1,
                          skip_corrupt=False, pin=True)
    assert pinned.pin_memory  # the runner asks for it when the device is CUDA
    if torch.cuda.is_available():
        assert next(iter(pinned))["image"].is_pinned()


def test_a_split_held_in_memory_gives_the_same_batches_from_workers():
    """A GPU run crops a held split in loader workers (`threads.training_workers`): the batches are those the
    process draws itself."""
    g = torch.Generator().manual_seed(0)
    held = TensorSplit(torch.randint(0, 256, (24, 3, 20, 20), generator=g, dtype=torch.uint8),
                       torch.arange(24) % 3, 3)
    streams = [train_loader(held, Preprocess(image_size=16), global_micro_batch=8, rank=0, world=1, seed=4,
                            start_micro_step=1, workers=workers, skip_corrupt=False) for workers in (0, 2)]
    with iterate(streams[0]) as own, iterate(streams[1]) as workers:
        for _ in range(5):  # across epochs (24 images, 8 a step)
            a, b = next(own), next(workers)
            assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])
            assert a["image"].dtype == torch.uint8 and a["image"].shape == (8, 3, 16, 16)


def test_stream_is_the_same_for_any_process_count():
    one = StreamSampler(50, 8, rank=0, world=1, seed=1)
    two = [StreamSampler(50, 8, rank=r, world=2, seed=1) for r in range(2)]
    it1, it2 = iter(one), [iter(s) for s in two]
    for _ in range(20):  # crosses epoch boundaries
        assert next(it1) == next(it2[0]) + next(it2[1])
    resumed = iter(StreamSampler(50, 8, rank=0, world=1, seed=1, start_micro_step=20))
    assert next(resumed) == next(it1)
    idx = [i for batch in [next(iter(StreamSampler(48, 48, 0, 1, 2)))] for i, _ in batch]
    assert sorted(idx) == list(range(48))  # one epoch visits every sample once


def test_image_folder(tmp_path):
    src = open_source(str(write_image_folder(tmp_path / "imgs")), "train")
    assert len(src) == 8 and src.num_classes == 2 and sorted(src.class_names) == ["blue", "red"]
    img, label = src.load(0)
    assert isinstance(img, EncodedImage)  # decoded in the loader's workers, not where the source is read
    assert decode(img).shape == (3, 20, 20) and src.class_names[label] in ("blue", "red")
    assert open_source(str(tmp_path / "imgs"), "validation") is None


def test_corrupt_image_is_named_or_skipped(tmp_path):
    src = open_source(str(write_image_folder(tmp_path / "imgs", corrupt=True)), "train")
    bad = next(i for i in range(len(src)) if "broken" in str(src.ds[i]["image"]["path"]))
    with pytest.raises(CorruptImageError, match=r"cannot decode image .*broken\.png"):
        decode(src.load(bad)[0])
    with pytest.raises(CorruptImageError):
        Batches(src, Preprocess(16), seed=0)[(bad, 0)]
    sample = Batches(src, Preprocess(16), seed=0, skip_corrupt=True).__getitems__([(bad, 0), (bad, None)])
    assert sample["skipped"].tolist() == [1, 1] and sample["image"].shape == (2, 3, 16, 16)
    record = src.load(bad)  # a stream's record: replaced by another record of the same batch
    good = src.load((bad + 1) % len(src))
    sample = Batches(src, Preprocess(16), seed=0, skip_corrupt=True).__getitems__([(record, 0), (good, 1)])
    assert sample["skipped"].tolist() == [1, 0] and sample["label"].tolist() == [good[1], good[1]]


def test_save_to_disk_folder_in_hub_format(tmp_path):
    """The layout online users get from `load_dataset(...).save_to_disk(...)`: ClassLabel + Image features."""
    import datasets

    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])})
    rows = {"image": [Image.new("RGB", (12, 12), (i * 40, 0, 0)) for i in range(6)], "label": [0, 1, 2, 0, 1, 2]}
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=feats),
                               "test": datasets.Dataset.from_dict(rows, features=feats)})
    dd.save_to_disk(str(tmp_path / "ds"))
    src = open_source(str(tmp_path / "ds"), "train")
    assert len(src) == 6 and src.class_names == ["a", "b", "c"]
    img, label = src.load(4)
    assert decode(img).shape == (3, 12, 12) and label == 1
    assert len(open_source(str(tmp_path / "ds"), "validation")) == 6  # falls back to the test split


@pytest.mark.parametrize("spec,match", [
    ("/no/such/dir", "data path /no/such/dir does not exist"),
    ("embedded:clouds", "unknown embedded dataset 'clouds'"),
    ("embedded:shapes(classes=40)", "2 to 10 classes"),
    ("embedded:digits(length=2000)", "embedded:digits has 1437 train images; length must be 0 to 1437, got 2000"),
    ("hf:nobody/nothing", "cannot load 'nobody/nothing' from the Hugging Face hub"),
])
def test_bad_data_specs(spec, match):
    with pytest.raises(VitxError, match=match):
        open_source(spec, "train")


def test_empty_folder(tmp_path):
    with pytest.raises(VitxError, match="holds no images, data files or tar shards"):
        open_source(str(tmp_path), "train")


def test_a_one_class_folder_says_one_class_not_no_labels(tmp_path):
    """`datasets` drops the labels of an image folder with a single class folder; the source keeps its one
    class, so that training a classifier on it is refused for what it is (one class), not "no labels"."""
    from .helpers import vitx_cli

    write_image_folder(tmp_path / "imgs")
    shutil.rmtree(tmp_path / "imgs" / "blue")
    src = open_source(str(tmp_path / "imgs"), "train")
    assert len(src) == 4 and src.num_classes == 1 and src.class_names == ["red"] and src.load(0)[1] == 0
    result = vitx_cli("pretrain", "--data", str(tmp_path / "imgs"), "--output-dir", str(tmp_path / "run"),
                      "--steps", "1", "--batch-size", "4", "--eval-samples", "0", "--log-with", "none")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "trains a classifier, which needs two or more classes; this dataset has one" in result.stderr
    assert "no labels" not in result.stderr


def test_the_test_split_in_words_says_what_test_samples_drew():
    """A draw names its size and the split's; asking for more than the split holds is said (all are used), never
    silently capped."""
    from vitx.data.draws import describe_test, drawn_test

    test = Shapes(size=8, length=360)
    assert describe_test(test) == describe_test(test, 360) == "360"
    assert describe_test(drawn_test(test, 100, 0), 100) == "100 of 360 (a seeded, class-stratified draw: " \
                                                          "--test-samples)"
    assert drawn_test(test, 1000, 0) is test
    assert describe_test(test, 1000) == "all 360 (--test-samples 1,000 asks for more than the split holds)"


def test_classes_a_training_split_has_no_image_of():
    """What `vitx transfer` warns of (--shots 5 on 10 classes trained a classifier that never predicts 8 of them)."""
    from vitx.data.draws import Subset, classes_unseen

    digits = Shapes(size=8, length=100)
    labels = np.asarray([digits.load(i)[1] for i in range(100)])
    kept = np.flatnonzero(labels < 3)[:6]  # (6,) images of classes 0-2 only
    assert classes_unseen(Subset(digits, kept), 10) == list(range(3, 10))
    assert classes_unseen(digits, 10) == []


def test_a_column_key_for_embedded_data_is_refused():
    """Embedded data is generated: --label-key there was recorded in config.json and ignored."""
    from vitx.data import DataOptions
    from vitx.data.opener import open_data

    with pytest.raises(VitxError, match=r"^--label-key names a column of a dataset's table; embedded:digits is "
                                        "generated"):
        open_data("embedded:digits", DataOptions(label_key="nope"))
