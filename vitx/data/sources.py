"""Where images come from. Every source becomes an `ImageSource`: `len()`, `load(i) -> (PIL image, label)`,
`num_classes` (None when unlabeled) and `class_names`.

`--data` accepts:
  embedded:NAME(opts)   procedural data generated on the fly (leaves, shapes, digits); see `procedural.py`
  /path/to/folder       a `datasets` `save_to_disk` folder, or an image folder laid out `class/xxx.jpg`
  hf:OWNER/NAME         a Hugging Face hub dataset (needs internet; `OWNER/NAME` alone works when no such path exists)
  shards-{0000..0099}.tar, a folder of .tar, or URLs: WebDataset shards, streamed (`streams.py`)
With `--stream`, hub datasets and local copies of them (parquet, image folders) are streamed too.
Files and hub datasets are read through Hugging Face `datasets`; images are decoded here so that a corrupt file is
reported by name.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image

from ..errors import CorruptImageError, VitxError
from ..spec import parse_spec
from .decoding import EncodedImage
from .procedural import EMBEDDED

SPLIT_ALIASES = {"train": ("train",), "validation": ("validation", "valid", "val", "test"), "test": ("test",)}


class ImageSource(Protocol):
    num_classes: int | None
    class_names: list[str] | None

    def __len__(self) -> int: ...

    def load(self, index: int) -> tuple[Image.Image, Any]: ...


class Columns:
    """Which columns of a `datasets` table (map-style or streamed) hold the image and the label, and what the
    labels are; turns a row into `(image, label)` without decoding the image."""

    def __init__(self, features: Any, origin: str, labels: Any = None) -> None:
        from datasets import ClassLabel, Image as HFImage, Sequence

        self.origin = origin
        image_key = next((k for k, f in features.items() if isinstance(f, HFImage)), None)
        if image_key is None:
            image_key = next((k for k in ("image", "img", "jpg", "jpeg", "png", "webp") if k in features), None)
        if image_key is None:
            raise VitxError(f"{origin} has no image column (columns: {', '.join(features)})")
        self.image_key = image_key
        self.label_key = next((k for k in ("label", "labels", "cls", "fine_label") if k in features), None)
        self.num_classes: int | None = None
        self.class_names: list[str] | None = None
        self.multilabel = False
        if self.label_key is not None:
            feat = features[self.label_key]
            if isinstance(feat, ClassLabel):
                self.num_classes, self.class_names = feat.num_classes, list(feat.names)
            elif isinstance(feat, Sequence) and isinstance(feat.feature, ClassLabel):
                self.num_classes, self.class_names = feat.feature.num_classes, list(feat.feature.names)
                self.multilabel = True
            elif labels is not None:
                self.num_classes = int(max(labels(self.label_key))) + 1

    def undecoded(self, ds: Any) -> Any:
        """`ds` with its image column left as bytes: workers decode (and name a corrupt file)."""
        from datasets import Image as HFImage

        if isinstance(ds.features[self.image_key], HFImage):
            return ds.cast_column(self.image_key, HFImage(decode=False))
        return ds

    def record(self, row: dict[str, Any], name: str, path_names: bool = True) -> tuple[Any, Any]:
        """A row → (EncodedImage or PIL image, label or None); errors name the image's file when `path_names`
        (a stream names the shard and key instead)."""
        value = row[self.image_key]
        if isinstance(value, dict):
            name = (value.get("path") if path_names else None) or name
            raw = value.get("bytes")
            image = EncodedImage(raw, name) if raw is not None else EncodedImage.from_file(value["path"])
        elif isinstance(value, (bytes, bytearray)):
            image = EncodedImage(bytes(value), name)
        elif isinstance(value, Image.Image):
            image = value
        else:
            raise CorruptImageError(f"cannot decode image {name}: unsupported value {type(value).__name__}")
        label = row[self.label_key] if self.label_key is not None else None
        if self.multilabel:
            hot = [0] * int(self.num_classes)
            for k in label:
                hot[k] = 1
            label = hot
        return image, label


class HFImageSource:
    """A `datasets.Dataset` with an image column and (optionally) a class-label column."""

    def __init__(self, ds: Any, origin: str) -> None:
        self.origin = origin
        columns = Columns(ds.features, origin, labels=lambda key: ds[key])
        self.columns = columns
        self.image_key, self.label_key = columns.image_key, columns.label_key
        self.num_classes, self.class_names, self.multilabel = columns.num_classes, columns.class_names, columns.multilabel
        self.ds = columns.undecoded(ds)

    def __len__(self) -> int:
        return len(self.ds)

    def load(self, index: int) -> tuple[Any, Any]:
        return self.columns.record(self.ds[int(index)], f"#{index} of {self.origin}")


def source_labels(source: ImageSource) -> np.ndarray:
    """Every label of a source, without decoding images where the source can say them directly. (N,) int64"""
    labels = getattr(source, "labels", None)
    if labels is not None:  # a method (task splits) or a tensor (in-memory splits)
        return np.asarray(labels() if callable(labels) else labels, dtype=np.int64)
    if isinstance(source, HFImageSource) and source.label_key is not None and not source.multilabel:
        return np.asarray(source.ds[source.label_key], dtype=np.int64)
    return np.asarray([source.load(i)[1] for i in range(len(source))], dtype=np.int64)


def _pick_split(dd: Any, split: str, origin: str) -> Any:
    for name in SPLIT_ALIASES[split]:
        if name in dd:
            return dd[name]
    if split == "train":
        raise VitxError(f"{origin} has no '{split}' split (splits: {', '.join(dd)})")
    return None


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or os.path.exists(spec)


def open_source(spec: str, split: str = "train", image_size: int = 32, seed: int = 0, stream: bool = False,
                shuffle_buffer: int = 0) -> Any:
    """Resolve a `--data` spec to a source for `split`; None when an optional split (validation) is absent.
    WebDataset shards, and any other spec with `stream`, give a `StreamSource` (`streams.py`)."""
    if spec.startswith("embedded:"):
        name, options = parse_spec(spec[len("embedded:"):])
        if name not in EMBEDDED:
            raise VitxError(f"unknown embedded dataset '{name}'; choose from {', '.join(EMBEDDED)}")
        options.setdefault("size", image_size)
        if name != "digits":
            options.setdefault("seed", seed)
        if split != "train":  # `length` sizes the training split; `eval_length` the validation split
            options["length"] = options.pop("eval_length", 0 if name == "digits" else 2_000)
        else:
            options.pop("eval_length", None)
        known = [f.name for f in dataclasses.fields(EMBEDDED[name])
                 if f.name not in ("split", "num_classes", "class_names")]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise VitxError(f"embedded:{name} has no option '{unknown[0]}' (its options: {', '.join(known)}, "
                            "eval_length)")
        return EMBEDDED[name](split=split, **options)
    from .streams import is_shards, open_stream

    if stream or is_shards(spec):
        local = Path(spec).expanduser()
        if _looks_like_path(spec) and not local.exists() and not is_shards(spec):
            raise VitxError(f"data path {local} does not exist")
        if local.is_dir() and ((local / "dataset_dict.json").exists() or (local / "state.json").exists()):
            return _open_local(local, split)  # save_to_disk folders are memory-mapped: nothing to stream
        return open_stream(spec, split, shuffle_buffer)
    if _looks_like_path(spec):
        return _open_local(Path(spec).expanduser(), split)
    return _open_hub(spec[3:] if spec.startswith("hf:") else spec, split)


def _open_local(path: Path, split: str) -> ImageSource | None:
    if not path.exists():
        raise VitxError(f"data path {path} does not exist")
    if not path.is_dir():
        raise VitxError(f"data path {path} is not a folder (expected a save_to_disk folder or class/image folders)")
    import datasets

    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        try:
            loaded = datasets.load_from_disk(str(path))
        except Exception as exc:
            raise VitxError(f"cannot read dataset folder {path}: {exc}") from None
        if isinstance(loaded, datasets.DatasetDict):
            loaded = _pick_split(loaded, split, str(path))
            if loaded is None:
                return None
        elif split != "train":
            return None
        return HFImageSource(loaded, str(path))
    if not any(p.is_dir() for p in path.iterdir()):
        raise VitxError(f"{path} has no class folders (expected {path}/<class>/<image>) and is not a save_to_disk folder")
    if split != "train" and not any((path / name).is_dir() for name in SPLIT_ALIASES[split]):
        return None
    try:
        dd = datasets.load_dataset("imagefolder", data_dir=str(path))
    except Exception as exc:
        raise VitxError(f"cannot read image folder {path}: {str(exc).splitlines()[0]}") from None
    chosen = _pick_split(dd, split, str(path))
    if chosen is None:
        return None
    lone = _lone_class(path, split)
    if lone is not None and "label" not in chosen.features:  # datasets drops a lone class's labels: keep them,
        chosen = chosen.add_column("label", [0] * len(chosen))  # so that a classifier is told "one class"
        chosen = chosen.cast_column("label", datasets.ClassLabel(names=[lone]))
    return HFImageSource(chosen, str(path))


def _lone_class(path: Path, split: str) -> str | None:
    """The name of an image folder's only class folder (in the split's folder, when it has one), else None."""
    root = next((path / name for name in SPLIT_ALIASES[split] if (path / name).is_dir()), path)
    classes = [d.name for d in root.iterdir() if d.is_dir()]
    return classes[0] if len(classes) == 1 else None


def _open_hub(repo: str, split: str) -> ImageSource | None:
    import datasets

    try:
        dd = datasets.load_dataset(repo)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise VitxError(f"cannot load '{repo}' from the Hugging Face hub ({first[:200]}); offline, save a copy with "
                        "datasets' save_to_disk and pass --data /path/to/it") from None
    chosen = _pick_split(dd, split, repo)
    return None if chosen is None else HFImageSource(chosen, repo)
