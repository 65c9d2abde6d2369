"""Your own labelled images, in every layout other projects write them (each written here by that project's own
writer): read by the one opener (`vitx/data/opener.py`) with the right classes, split sizes and labels; the
label and image keys; the one-line refusals; a pre-training and a transfer on them; and the README's "Your own
data" commands. Images are 12x12, one colour per class, so every label read is checked against its pixels."""
from __future__ import annotations

import io
import json
import re
import shlex
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, features

from vitx.data import decode
from vitx.data.draws import validation_split
from vitx.data.opener import DataOptions, open_data
from vitx.data.sources import source_labels

from .helpers import ROOT, metrics, vitx_cli

NAMES = ["blue", "green", "red"]  # class k is NAMES[k]: string labels are numbered in sorted order
COLOURS = {"blue": (20, 30, 230), "green": (30, 220, 40), "red": (225, 25, 35), "cyan": (20, 230, 230),
           "grey": (128, 128, 128)}
PER_CLASS = {"train": 6, "validation": 2, "test": 3}
SIZE = 12
WEBP = features.check("webp")


def picture(name: str, serial: int) -> Image.Image:
    """A 12x12 image of the class's colour; its bottom row spells `serial` in black and white pixels (12 bits),
    so that every file differs, JPEGs too."""
    pixels = np.zeros((SIZE, SIZE, 3), np.uint8)
    pixels[:] = COLOURS[name]
    pixels[-1] = [(0, 0, 0) if (serial >> bit) & 1 else (255, 255, 255) for bit in range(SIZE)]
    return Image.fromarray(pixels)


def encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def colour_class(image, names: list[str] = NAMES) -> int:
    """The class whose colour is nearest an image's mean colour."""
    mean = decode(image).float().mean(dim=(1, 2)).numpy()  # (3,)
    return int(np.argmin([np.abs(mean - COLOURS[n]).sum() for n in names]))


def samples(split: str, names: list[str] = NAMES, per_class: int | None = None) -> list[tuple[int, int]]:
    """(serial, class) of a split's images: PER_CLASS[split] per class, sorted by class, as class folders are."""
    n, base = per_class or PER_CLASS[split], {"train": 0, "validation": 500, "test": 1000}[split]
    return [(base + k * n + i, k) for k in range(len(names)) for i in range(n)]


# -- the layouts, each written by its own project's writer -----------------------------------------------------
def write_image_folder(root: Path, splits=("train", "test"), per_class: int | None = None) -> None:
    """torchvision's ImageFolder: `root/<split>/<class>/*.jpg` (JPEG train, PNG test); `splits=()`: no split
    folders, `root/<class>/*.png`."""
    for split in splits or ("train",):
        for serial, k in samples(split, per_class=per_class):
            folder = root / split / NAMES[k] if splits else root / NAMES[k]
            folder.mkdir(parents=True, exist_ok=True)
            fmt = "JPEG" if split == "train" and splits else "PNG"
            picture(NAMES[k], serial).save(folder / f"{serial:04d}.{'jpg' if fmt == 'JPEG' else 'png'}", format=fmt)


def write_metadata_folder(root: Path, kind: str, names: dict[str, list[str]] | None = None) -> None:
    """datasets' imagefolder with metadata: flat `root/<split>/*.png` and a `metadata.csv` (file_name,label;
    string labels, written in reverse class order) or `metadata.jsonl` (int labels)."""
    for split in ("train", "test"):
        split_names = (names or {}).get(split, NAMES)
        folder = root / split
        folder.mkdir(parents=True)
        rows = []
        for serial, k in reversed(samples(split, split_names)):
            picture(split_names[k], serial).save(folder / f"img{serial:04d}.png")
            rows.append((f"img{serial:04d}.png", split_names[k] if kind == "csv" else k))
        if kind == "csv":
            (folder / "metadata.csv").write_text("file_name,label\n" + "".join(f"{f},{y}\n" for f, y in rows))
        else:
            (folder / "metadata.jsonl").write_text("".join(json.dumps({"file_name": f, "label": y}) + "\n"
                                                           for f, y in rows))


def image_table(split: str, label: str, extra: bool = False):
    """A `datasets.Dataset` of one split: an Image column and the labels as ClassLabel, int64 or string."""
    import datasets

    pairs = samples(split)
    columns = {"image": [picture(NAMES[k], s) for s, k in pairs]}
    if label == "classlabel":
        feats = {"image": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)}
        columns["label"] = [k for _, k in pairs]
    elif label == "int":
        feats = {"image": datasets.Image(), "label": datasets.Value("int64")}
        columns["label"] = [k for _, k in pairs]
    else:
        feats = {"image": datasets.Image(), "label": datasets.Value("string")}
        columns["label"] = [NAMES[k] for _, k in pairs]
    if extra:  # columns named as in CIFAR-100's hub copy (img, coarse_label: blue or not), a grey thumbnail first
        columns = {"thumbnail": [picture("grey", s) for s, _ in pairs], "img": columns.pop("image"), **columns,
                   "coarse_label": [int(k != 0) for _, k in pairs]}
        feats = {"thumbnail": datasets.Image(), "img": datasets.Image(), "label": feats["label"],
                 "coarse_label": datasets.Value("int64")}
    return datasets.Dataset.from_dict(columns, features=datasets.Features(feats))


def write_saved(root: Path, lone: bool) -> None:
    """`datasets` save_to_disk: a DatasetDict (train/test, ClassLabel), or a lone Dataset."""
    import datasets

    if lone:
        image_table("train", "classlabel").save_to_disk(str(root))
    else:
        datasets.DatasetDict({s: image_table(s, "classlabel") for s in ("train", "test")}).save_to_disk(str(root))


def write_parquet(root: Path, label: str, extra: bool = False) -> None:
    """The hub's layout: `root/data/<split>-00000-of-00001.parquet`, written by `Dataset.to_parquet`."""
    for split in ("train", "test"):
        image_table(split, label, extra).to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))


def write_shards(folder: Path, image: str, label: str, split: str, preview: bool = False) -> None:
    """WebDataset shards by `webdataset.ShardWriter`, 10 samples a shard: `folder/<split>-NNNN.tar`, an `image`
    member (jpg, png, webp) and a `label` member: cls (class number), json ({"label": k, "shade": name}) or txt
    (class name); `preview`: a grey jpg before the png."""
    import webdataset

    folder.mkdir(parents=True, exist_ok=True)
    fmt = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[image]
    with webdataset.ShardWriter(str(folder / f"{split}-%04d.tar"), maxcount=10, verbose=0) as sink:
        for serial, k in samples(split):
            value = {"cls": k, "json": {"label": k, "shade": NAMES[k]}, "txt": NAMES[k]}[label]
            sample = {"__key__": f"s{serial:04d}"}
            if preview:
                sample["jpg"] = encoded(picture("grey", serial), "JPEG")
            sink.write({**sample, image: encoded(picture(NAMES[k], serial), fmt), label: value})


def write_release(folder: Path) -> None:
    """The VTAB-1k folder release (as tests/test_vtab_release.py writes it): train800.txt, val200.txt,
    train800val200.txt, test.txt, lines `images/<split>/000000.jpg <label>`."""
    lines: dict[str, list[str]] = {}
    for split, name in (("train", "train800"), ("validation", "val200"), ("test", "test")):
        (folder / "images" / name).mkdir(parents=True)
        lines[name] = []
        for serial, k in samples(split):
            picture(NAMES[k], serial).save(folder / "images" / name / f"{serial:06d}.jpg", quality=95)
            lines[name].append(f"images/{name}/{serial:06d}.jpg {k}")
    lines["train800val200"] = lines["val200"] + lines["train800"]
    for name, rows in lines.items():
        (folder / f"{name}.txt").write_text("\n".join(rows) + "\n")


# name → (spec relative to the data root, layout, class names (None: numbers), {split: images})
TWO = {"train": 18, "test": 9}
LAYOUTS = {
    "image-folder": ("image-folder", "image folder", NAMES, TWO),
    "class-folders": ("class-folders", "image folder", NAMES, {"train": 18}),
    "metadata-csv": ("metadata-csv", "image folder", NAMES, TWO),
    "metadata-jsonl": ("metadata-jsonl", "image folder", None, TWO),
    "saved-dict": ("saved-dict", "save_to_disk", NAMES, TWO),
    "saved-lone": ("saved-lone", "save_to_disk", NAMES, {"train": 18}),
    "parquet-int": ("parquet-int", "data files", None, TWO),
    "parquet-str": ("parquet-str", "data files", NAMES, TWO),
    "shards-cls": ("shards-cls", "WebDataset shards", None, {"train": 18}),
    "shards-pattern": ("shards-cls/train-{0000..0001}.tar", "WebDataset shards", None, {"train": 18}),
    "shards-clip": ("shards-clip", "WebDataset shards", [f"{n} patch" for n in NAMES], TWO),
    "shards-json": ("shards-json", "WebDataset shards", None, TWO),
    "shards-txt": ("shards-txt", "WebDataset shards", NAMES, TWO),
    "vtab-release": ("vtab-release", "VTAB-1k folder release", ["0", "1", "2"],
                     {"train": 18, "validation": 6, "test": 9}),
}


@pytest.fixture(scope="module", autouse=True)
def datasets_cache(tmp_path_factory) -> Path:
    """What `datasets` caches of the folders read here goes to a folder of this module's own, not the user's."""
    import datasets

    folder = tmp_path_factory.mktemp("datasets-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", folder)
        yield folder


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Every layout above, and the odd cases, written once under one root (~1 s)."""
    root = tmp_path_factory.mktemp("layouts")
    write_image_folder(root / "image-folder")
    write_image_folder(root / "class-folders", splits=())
    write_image_folder(root / "class-folders-60", splits=(), per_class=20)
    write_metadata_folder(root / "metadata-csv", "csv")
    write_metadata_folder(root / "metadata-jsonl", "jsonl")
    write_saved(root / "saved-dict", lone=False)
    write_saved(root / "saved-lone", lone=True)
    write_parquet(root / "parquet-int", "int")
    write_parquet(root / "parquet-str", "str")
    write_shards(root / "shards-cls", "jpg", "cls", "train")  # two shards, no classnames.txt anywhere
    for split in ("train", "test"):  # clip-benchmark's layout: <root>/<split>/*.tar, <root>/classnames.txt
        write_shards(root / "shards-clip" / split, "jpg", "cls", split)
        write_shards(root / "shards-json" / split, "png", "json", split)
        write_shards(root / "shards-txt" / split, "webp" if WEBP else "png", "txt", split)
    (root / "shards-clip" / "classnames.txt").write_text("".join(f"{n} patch\n" for n in NAMES))
    for split in ("train", "test"):  # string labels numbered by a classnames.txt, not sorted
        write_shards(root / "shards-named" / split, "png", "txt", split)
    (root / "shards-named" / "classnames.txt").write_text("red\ngreen\nblue\n")
    write_release(root / "vtab-release")
    write_shards(root / "shards-two-images", "png", "cls", "train", preview=True)
    # the odd cases
    write_parquet(root / "two-columns", "int", extra=True)
    write_metadata_folder(root / "vocabulary", "csv", {"test": ["blue", "cyan", "green", "red"]})
    (root / "unlabelled").mkdir()
    for serial, k in samples("train"):
        picture(NAMES[k], serial).save(root / "unlabelled" / f"{serial:04d}.png")
    (root / "empty").mkdir()
    (root / "not-images").mkdir()
    for i in range(3):
        (root / "not-images" / f"blob{i}.bin").write_bytes(np.random.default_rng(i).bytes(300))
    (root / "not-images" / "notes.txt").write_text("no pictures here\n")
    return root


def check_split(source, expected_images: int) -> None:
    """A split's labels, read from the table, are the labels its images were written with (by colour)."""
    labels = source_labels(source)
    assert labels.dtype == np.int64 and len(labels) == len(source) == expected_images
    loaded = [source.load(i) for i in range(len(source))]
    assert [int(label) for _, label in loaded] == labels.tolist()
    assert [colour_class(image) for image, _ in loaded] == labels.tolist()
    assert Counter(labels.tolist()) == {k: expected_images // 3 for k in range(3)}


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_layout_opens_with_its_classes_and_labels(data, name):
    spec, layout, class_names, lengths = LAYOUTS[name]
    opened = open_data(str(data / spec))
    assert opened.layout == layout
    assert opened.num_classes == 3 and opened.class_names == class_names
    assert {split: len(opened.split(split)) for split in ("train", "validation", "test")
            if opened.split(split) is not None} == lengths
    for split, count in lengths.items():
        check_split(opened.split(split), count)


def test_the_label_found_is_described(data):
    described = {name: open_data(str(data / LAYOUTS[name][0])).labels_described()
                 for name in ("image-folder", "metadata-csv", "parquet-int", "shards-cls", "shards-json", "shards-txt")}
    assert described == {
        "image-folder": "'label' (named classes, 3 classes)",
        "metadata-csv": "'label' (class names, numbered in sorted order, 3 classes)",
        "parquet-int": "'label' (class numbers, 3 classes)",
        "shards-cls": "'cls' (class numbers, 3 classes)",
        "shards-json": "'json.label' (class numbers, 3 classes)",
        "shards-txt": "'txt' (class names, numbered in sorted order, 3 classes)",
    }


def test_label_key_and_image_key_choose_the_columns(data):
    spec = str(data / "two-columns")
    default = open_data(spec)  # the first image column (grey thumbnails), the column named label
    assert default.columns.image_key == "thumbnail" and default.columns.label_path == ("label",)
    assert default.num_classes == 3 and colour_class(default.split("train").load(0)[0], NAMES + ["grey"]) == 3
    chosen = open_data(spec, DataOptions(label_key="coarse_label", image_key="img"))
    assert chosen.columns.image_key == "img" and chosen.columns.label_path == ("coarse_label",)
    assert chosen.num_classes == 2 and chosen.class_names is None
    for split, count in (("train", 18), ("test", 9)):
        source = chosen.split(split)
        colours = [colour_class(source.load(i)[0]) for i in range(len(source))]
        assert len(source) == count and source_labels(source).tolist() == [int(c != 0) for c in colours]
        assert Counter(source_labels(source).tolist()) == {0: count // 3, 1: 2 * count // 3}


@pytest.mark.parametrize("key,path,classes,names", [
    ("json.label", ("json", "label"), 3, None),
    ("label", ("json", "label"), 3, None),  # a field of a dict column, named alone
    ("json.shade", ("json", "shade"), 3, NAMES),  # string names in the json: sorted
])
def test_label_key_reads_a_field_of_a_shards_json(data, key, path, classes, names):
    opened = open_data(str(data / "shards-json"), DataOptions(label_key=key))
    assert opened.columns.label_path == path and opened.num_classes == classes and opened.class_names == names
    check_split(opened.split("train"), 18)
    check_split(opened.split("test"), 9)


def test_image_key_names_a_shards_member(data):
    """Shards with two image members (a grey `jpg` preview, the `png` picture): `--image-key png` reads the one
    named, and its labels still match."""
    default = open_data(str(data / "shards-two-images"))
    assert default.columns.image_key == "jpg"
    assert colour_class(default.split("train").load(0)[0], NAMES + ["grey"]) == 3
    opened = open_data(str(data / "shards-two-images"), DataOptions(image_key="png"))
    assert opened.columns.image_key == "png" and opened.columns.label_path == ("cls",)
    check_split(opened.split("train"), 18)


def test_string_labels_share_one_vocabulary_across_splits(data):
    """A class that only the test split has (cyan) still gets an index, the same in every split: the names of
    all splits, sorted."""
    opened = open_data(str(data / "vocabulary"))
    assert opened.num_classes == 4 and opened.class_names == ["blue", "cyan", "green", "red"]
    train, test = opened.split("train"), opened.split("test")
    assert Counter(source_labels(train).tolist()) == {0: 6, 2: 6, 3: 6}  # green is 2 and red 3 in train too
    assert Counter(source_labels(test).tolist()) == {0: 3, 1: 3, 2: 3, 3: 3}
    names = ["blue", "cyan", "green", "red"]
    for source in (train, test):
        assert [colour_class(source.load(i)[0], names) for i in range(len(source))] == source_labels(source).tolist()


def test_classnames_txt_orders_string_labels(data):
    """A classnames.txt above the split folders numbers the `.txt` class names in its order, not sorted."""
    opened = open_data(str(data / "shards-named"))
    assert opened.class_names == ["red", "green", "blue"] and opened.num_classes == 3
    for split, count in (("train", 18), ("test", 9)):
        source = opened.split(split)
        assert [2 - colour_class(source.load(i)[0]) for i in range(count)] == source_labels(source).tolist()


def test_the_description_of_classnames_txt_labels_does_not_say_sorted(data):
    assert "sorted" not in open_data(str(data / "shards-named")).labels_described()


# -- draws: pre-training's validation, transfer's shots (no training) ------------------------------------------
def test_a_streamed_hold_out_is_never_trained_on(data):
    """Class folders without a validation or test split, streamed (stored sorted by class): the validation
    images are held out of train by a seeded shuffle, not taken first, and training never reads them."""
    opened = open_data(str(data / "class-folders"), DataOptions(stream=True))
    assert hasattr(opened.split("train"), "micro_batches") and opened.split("test") is None
    train, val, record = validation_split(opened, 3, seed=0)  # 3 of the first 12 of a seeded shuffle, stratified
    assert record["split"] == "held out of train" and record["images"] == len(val) == 3
    assert record["class_counts"] == [1, 1, 1], record
    assert [label for _, label in val.records] == [colour_class(image) for image, _ in val.records]
    held = {image.data for image, _ in val.records}
    assert len(held) == 3
    records = train.records(0, 1, seed=0)
    seen = [image.data for image, _ in (next(records) for _ in range(2 * 15))]  # two passes over the other 15
    records.close()
    assert not held & set(seen)
    assert len(set(seen)) == 15 and set(Counter(seen).values()) == {2}
    again = validation_split(open_data(str(data / "class-folders"), DataOptions(stream=True)), 3, seed=0)[1]
    assert [image.data for image, _ in again.records] == [image.data for image, _ in val.records]  # seeded


def test_a_streamed_hold_out_covers_every_class_at_every_seed(data):
    for seed in range(3):
        opened = open_data(str(data / "shards-cls"), DataOptions(stream=True))
        record = validation_split(opened, 3, seed=seed)[2]
        assert record["class_counts"] == [1, 1, 1], (seed, record)


def test_a_map_style_hold_out_is_stratified(data):
    """Without a stream, images are held out of train in proportion to each class (at most a tenth of train)."""
    opened = open_data(str(data / "class-folders-60"))
    for seed in range(3):
        train, val, record = validation_split(opened, 6, seed=seed)
        assert record["split"] == "held out of train" and record["class_counts"] == [2, 2, 2], record
        assert len(train) == 54 and len(val) == 6 and not set(train.indices) & set(val.indices)
    assert validation_split(opened, 100, seed=0)[2]["class_counts"] == [2, 2, 2]  # a tenth of 60, not 100


@pytest.mark.parametrize("name,test_from,val_from,test_images", [
    ("image-folder", "its test split", "a stratified part of the draw", 9),
    ("class-folders", "a seeded, stratified fifth of train", "a stratified part of the draw", 3),
    ("saved-lone", "a seeded, stratified fifth of train", "a stratified part of the draw", 3),
    ("parquet-str", "its test split", "a stratified part of the draw", 9),
    ("shards-clip", "its test split", "a stratified part of the draw", 9),
])
def test_shots_are_a_seeded_class_balanced_draw(data, name, test_from, val_from, test_images):
    """`--shots 15` of 3 classes stored sorted by class: 4 + 1 of each, never the first files; the data's test
    split, else a stratified fifth of train held out first; disjoint, and the same for the same seed."""
    from vitx.tasks import open_task, select_tasks

    spec = str(data / LAYOUTS[name][0])
    (task,) = select_tasks(spec)
    assert task.group == "custom" and task.num_classes == 3
    splits = open_task(task, 15, seed=0)
    record = splits.record
    assert record["train_per_class"] == [4, 4, 4] and record["val_per_class"] == [1, 1, 1]
    assert record["test_from"].startswith(test_from) and record["val_from"].startswith(val_from)
    assert record["test_images"] == len(splits.test) == test_images
    for part, count in ((splits.train, 12), (splits.val, 3), (splits.test, test_images)):
        labels = source_labels(part)
        assert len(part) == count and [colour_class(part.load(i)[0]) for i in range(count)] == labels.tolist()
    images = [bytes(part.load(i)[0].data) for part in (splits.train, splits.val, splits.test) for i in range(len(part))]
    assert len(set(images)) == 12 + 3 + test_images  # no image in two splits
    again = open_task(select_tasks(spec)[0], 15, seed=0)
    assert [bytes(again.train.load(i)[0].data) for i in range(12)] == images[:12]
    other = open_task(select_tasks(spec)[0], 15, seed=1)
    assert [bytes(other.train.load(i)[0].data) for i in range(12)] != images[:12]


@pytest.mark.parametrize("stream", [False, True])
def test_shots_that_leave_a_class_without_training_images_are_refused(data, stream):
    """`--shots 3` of 3 classes: a balanced draw of 1 each, of which 1 is held out to validate, so one class had
    no training image at all (train per class [0, 1, 1]) and its test images could never be right. Refused;
    `--shots 4`, the smallest whose 4/5 covers 3 classes, trains every class."""
    from vitx.data.opener import DataOptions as Options
    from vitx.errors import VitxError
    from vitx.tasks import open_task, select_tasks

    spec = str(data / LAYOUTS["image-folder"][0])
    for seed in range(3):
        with pytest.raises(VitxError, match=r"--shots 3 leaves 1 of 3 classes without a training image"):
            open_task(select_tasks(spec, Options(stream=stream))[0], 3, seed=seed)
        record = open_task(select_tasks(spec, Options(stream=stream))[0], 4, seed=seed).record
        assert record["train_per_class"] == [1, 1, 1] and sum(record["val_per_class"]) == 1


def test_streamed_shots_are_drawn_as_the_stream_is_read(data):
    """`--stream`: the same class-balanced counts, read from a seeded shuffle of the stream; the test split is
    held encoded (a seeded sample with --test-samples)."""
    from vitx.data.opener import DataOptions as Options
    from vitx.tasks import open_task, select_tasks

    (task,) = select_tasks(str(data / LAYOUTS["image-folder"][0]), Options(stream=True))
    splits = open_task(task, 15, seed=0, test_samples=6)
    record = splits.record
    assert record["draw"] == "class-balanced, seeded, read from a stream"
    assert record["train_per_class"] == [4, 4, 4] and record["val_per_class"] == [1, 1, 1]
    assert len(splits.test) == record["test_images"] == 6
    for part in (splits.train, splits.val, splits.test):
        assert [colour_class(part.load(i)[0]) for i in range(len(part))] == source_labels(part).tolist()


# -- refusals: one line, exit 2 --------------------------------------------------------------------------------
def tiny_pretrain(tmp_path: Path, data: str, *more: str) -> list[str]:
    return ["pretrain", "--data", data, "--model", "vit-nano/4", "--image-size", "8", "--steps", "1",
            "--batch-size", "4", "--warmup-steps", "0", "--eval-samples", "2", "--workers", "0", "--log-with", "none",
            "--no-curves", "--output-dir", str(tmp_path / "run"), *more]


def tiny_transfer(tmp_path: Path, task: str, *more: str) -> list[str]:
    return ["transfer", "--task", task, "--from", "scratch", "--model", "vit-nano/4", "--no-sweep", "--steps", "1",
            "--batch-size", "4", "--workers", "0", "--no-curves", "--output-dir", str(tmp_path / "out"), *more]


def refused(result) -> str:
    """The one line a refusal prints."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def read_once(path: Path) -> str:
    """`path`, read once before the command is (datasets caches it), so that the command's stderr holds only
    what vitx says: see test_a_first_read_prints_only_the_error for what `datasets` adds on a first read."""
    open_data(str(path))
    return str(path)


@pytest.mark.parametrize("case,args,expected", [
    ("unlabelled", lambda d, t: tiny_pretrain(t, read_once(d / "unlabelled")),
     [r"--objective supervised needs labelled images", r"looked for a ClassLabel column", r"--label-key$"]),
    ("label-key", lambda d, t: tiny_pretrain(t, read_once(d / "image-folder"), "--label-key", "nosuch"),
     [r"no column or field 'nosuch' for --label-key \(columns: image, label\)"]),
    ("image-key", lambda d, t: tiny_pretrain(t, read_once(d / "image-folder"), "--image-key", "nosuch"),
     [r"no column 'nosuch' for --image-key \(columns: image, label\)"]),
    ("empty", lambda d, t: tiny_pretrain(t, str(d / "empty")), [r"empty holds no images, data files or tar shards"]),
    ("not-images", lambda d, t: tiny_pretrain(t, str(d / "not-images")),
     [r"not-images holds no images, data files or tar shards"]),
    ("num-classes", lambda d, t: tiny_pretrain(t, read_once(d / "image-folder"), "--objective",
                                               "supervised(num_classes=5)"),
     [r"takes its classes from the data, which has 3; drop num_classes=5"]),
    ("no-task", lambda d, t: tiny_transfer(t, str(d / "nosuch")),
     [r"unknown task '.*nosuch': not a registered task .* and no data at that path"]),
    ("unlabelled-task", lambda d, t: tiny_transfer(t, read_once(d / "unlabelled")),
     [r"--task .*unlabelled needs labelled images", r"looked for a ClassLabel column", r"--label-key$"]),
    ("shots", lambda d, t: tiny_transfer(t, read_once(d / "image-folder"), "--shots", "40"),
     [r"--shots 40 is more than .*image-folder holds \(18 train images\): pass --shots 18 or less"]),
    ("shots-leave-a-class-out", lambda d, t: tiny_transfer(t, read_once(d / "image-folder"), "--shots", "3"),
     [r"--shots 3 leaves 1 of 3 classes without a training image \((blue|green|red); train per class "
      r"\[(0, 1, 1|1, 0, 1|1, 1, 0)\]\): pass --shots 4 or more \(4/5 of them train\)$"]),
])
def test_refusals_are_one_line(data, tmp_path, case, args, expected):
    line = refused(vitx_cli(*args(data, tmp_path)))
    for pattern in expected:
        assert re.search(pattern, line), (pattern, line)
    assert not list(tmp_path.rglob("*.safetensors"))  # nothing was trained


def test_a_first_read_prints_only_the_error(tmp_path):
    (tmp_path / "fresh").mkdir()
    for serial, k in samples("train"):
        picture(NAMES[k], serial).save(tmp_path / "fresh" / f"{serial:04d}.png")
    refused(vitx_cli(*tiny_pretrain(tmp_path, str(tmp_path / "fresh"))))


# -- two runs end to end ----------------------------------------------------------------------------------------
def test_pretrain_on_shards_without_classnames(data, tmp_path):
    """`.cls` shards with no classnames.txt are labelled (classes 0..max; this once stopped with "no labels");
    the validation images are held out of the stream, their per-class counts recorded."""
    out = tmp_path / "run"
    result = vitx_cli("pretrain", "--data", str(data / "shards-cls"), "--model", "vit-nano/4", "--image-size", "8",
                      "--steps", "2", "--batch-size", "4", "--warmup-steps", "1", "--eval-samples", "3",
                      "--save-every", "2", "--workers", "0", "--log-with", "none", "--no-curves",
                      "--shuffle-buffer", "8", "--output-dir", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    config = json.loads((out / "config.json").read_text())["data"]
    assert config["num_classes"] == 3 and config["layout"] == "WebDataset shards"
    assert config["labels"] == "'cls' (class numbers, 3 classes)"
    validation = config["validation"]
    assert validation["split"] == "held out of train" and validation["images"] == 3
    assert validation["class_counts"] == [1, 1, 1]  # stratified, from shards written class by class
    rows = metrics(out)
    assert rows[-1]["step"] == 2 and 0.0 <= rows[-1]["val_top1"] <= 1.0


def test_transfer_to_a_class_sorted_image_folder(data, tmp_path):
    """`--shots 15` of 3 classes: a seeded, class-balanced draw of 12 train + 3 validation images, whatever the
    files' order; the test split is the folder's own."""
    out = tmp_path / "out"
    result = vitx_cli("transfer", "--task", str(data / "image-folder"), "--shots", "15", "--from", "scratch",
                      "--model", "vit-nano/4", "--no-sweep", "--steps", "2", "--batch-size", "8", "--workers", "0",
                      "--no-curves", "--output-dir", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    found = list(out.rglob("result.json"))
    assert len(found) == 1, found
    record = json.loads(found[0].read_text())
    assert record["num_classes"] == 3 and record["test_samples"] == 9 and record["group"] == "custom"
    splits = record["splits"]
    assert splits["train_per_class"] == [4, 4, 4] and splits["val_per_class"] == [1, 1, 1]
    assert splits["test_from"] == "its test split" and splits["test_images"] == 9
    assert "train per class [4, 4, 4], val per class [1, 1, 1]" in result.stdout  # the run's header


# -- the README's commands --------------------------------------------------------------------------------------
README_PATHS = {  # the README's placeholder → (the layout written above, its classes with the line's keys)
    "photos": ("image-folder", 3),
    "labelled": ("metadata-csv", 3),
    "saved": ("saved-dict", 3),
    "hub-copy": ("two-columns", 2),
    "shards": ("shards-cls", 3),
    "shards/train-{0000..0099}.tar": ("shards-pattern", 3),
    "clip-copy": ("shards-clip", 3),
    "captioned": ("shards-json", 3),
    "vtab-1k/dtd": ("vtab-release", 3),
}


def readme_commands() -> list[list[str]]:
    """The commands of README.md's "Your own data" block (comment lines left out)."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- example: own-data -->\n```bash\n(.*?)\n```", readme, re.S)
    assert found, "no '<!-- example: own-data -->' block in README.md"
    return [shlex.split(line, comments=True) for line in found.group(1).splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_readme_own_data_commands_open_the_layouts(data):
    """Each `--data` / `--task` in the README's "Your own data" block, with its --label-key / --image-key, opens
    the layout it stands for; every option it shows is one the command has. Nothing is trained."""
    import typer

    from vitx.cli import app

    group = typer.main.get_command(app)
    shown = []
    for argv in readme_commands():
        assert argv[:1] == ["vitx"] and argv[1] in ("pretrain", "transfer"), argv
        known = {o for p in group.commands[argv[1]].params for o in (*p.opts, *p.secondary_opts)}
        flags = [a for a in argv[2:] if a.startswith("--")]
        assert set(flags) <= known, (argv, set(flags) - known)
        given = dict(zip(argv[2:], argv[3:]))
        spec = given.get("--data") or given.get("--task")
        assert spec in README_PATHS, f"README.md's {spec} stands for no layout written here: add it to README_PATHS"
        name, classes = README_PATHS[spec]
        shown.append(name)
        where = LAYOUTS[name][0] if name in LAYOUTS else name
        opened = open_data(str(data / where),
                           DataOptions(label_key=given.get("--label-key"), image_key=given.get("--image-key")))
        assert opened.num_classes == classes and opened.split("train") is not None, argv
        if name in LAYOUTS:
            assert opened.layout == LAYOUTS[name][1], argv
    assert {"image-folder", "metadata-csv", "saved-dict", "two-columns", "shards-cls", "shards-pattern",
            "shards-clip", "shards-json", "vtab-release"} <= set(shown)
    assert {argv[1] for argv in readme_commands()} == {"pretrain", "transfer"}


def test_a_label_column_without_classes_is_no_labels_and_says_what_it_holds(tmp_path):
    """A column named `label` holding floats is not labels: self-supervised objectives read the data; a supervised
    run is refused in one line that says what the column holds."""
    import datasets

    rows = [picture(NAMES[k], serial) for serial, k in samples("train")]
    table = datasets.Dataset.from_dict({"image": rows, "label": [0.5 * i for i in range(len(rows))]})
    table.cast_column("image", datasets.Image()).to_parquet(str(tmp_path / "floats.parquet"))
    opened = open_data(str(tmp_path / "floats.parquet"))
    assert opened.num_classes is None and opened.labels_described() == "no labels"
    line = refused(vitx_cli(*tiny_pretrain(tmp_path, str(tmp_path / "floats.parquet"))))
    assert "has no labels ('label' holds Value('float64'), not class numbers or names)" in line
    assert line.endswith("name yours with --label-key")
    line = refused(vitx_cli(*tiny_pretrain(tmp_path, str(tmp_path / "floats.parquet"), "--label-key", "label")))
    assert "the label column 'label' holds Value('float64'), not class numbers or names" in line


def test_balanced_counts_never_take_more_than_a_class_has():
    from vitx.data.draws import balanced_counts, balanced_draw

    for seed in range(40):
        for available, total in (([1, 3], 3), ([5, 1, 7, 2], 10), ([2, 2, 9], 12), ([4] * 5, 7)):
            counts = balanced_counts(available, total, np.random.default_rng(seed))
            assert counts.sum() == total and (counts <= np.asarray(available)).all(), (available, total, counts)
            free = counts[counts < np.asarray(available)]  # classes that could give more: as even as can be
            if len(free):
                assert free.max() - free.min() <= 1 and counts.max() <= free.max(), (available, total, counts)
    assert sorted(np.bincount(np.array([0, 1, 1, 1])[balanced_draw(np.array([0, 1, 1, 1]), 3, 0)])) == [1, 2]


def test_a_resumed_run_holds_out_exactly_what_it_held_out(data):
    """Resuming never changes the training data: a run that held nothing out holds nothing out; one that did,
    holds out the same images (the requested size is recorded, not recomputed)."""
    opened = open_data(str(data / "class-folders"))
    train, val, record = validation_split(opened, 0, seed=0, hold_out=False)
    assert val is None and len(train) == 18
    first = validation_split(opened, 4, seed=0)
    again = validation_split(opened, 1024, seed=0, held=first[2]["requested"])  # --eval-samples changed
    assert list(again[0].indices) == list(first[0].indices) and list(again[1].indices) == list(first[1].indices)
    stream = open_data(str(data / "class-folders"), DataOptions(stream=True))
    one = validation_split(stream, 100, seed=0)
    two = validation_split(open_data(str(data / "class-folders"), DataOptions(stream=True)), 5, seed=0,
                           held=one[2]["requested"])
    assert one[0].excluded == two[0].excluded and len(one[0].excluded) == 1  # a tenth of 18


def test_splits_that_name_their_classes_differently_are_refused(tmp_path):
    import datasets

    def split(names, labels):
        features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)})
        return datasets.Dataset.from_dict({"image": [picture(NAMES[0], i) for i in range(len(labels))],
                                           "label": labels}, features=features)

    datasets.DatasetDict({"train": split(["a", "b", "c"], [0, 1, 2]), "test": split(["b", "c"], [0, 1])}).save_to_disk(
        str(tmp_path / "mixed"))
    from vitx.errors import VitxError

    with pytest.raises(VitxError, match=r"mixed:test names its classes differently from the train split"):
        open_data(str(tmp_path / "mixed"))
