"""One opener for labelled (or unlabelled) images: `--data`, `--task PATH|hf:NAME|SHARDS`, the VTAB copies,
`eval`, the monitor and `predict` all come here; nothing else in vitx opens a dataset.

A spec is, detected in this order:

  embedded:NAME(opts)     procedural data generated on the fly (`procedural.py`)
  shards                  WebDataset tar shards: `train-{0000..0099}.tar`, URLs, or a folder holding `*.tar` or
                          `<split>/*.tar` (each sample an image, jpg/jpeg/png/webp, and a cls/txt/json label)
  a save_to_disk folder   a `datasets` Dataset or DatasetDict
  a VTAB-1k release task  train800.txt, val200.txt, train800val200.txt, test.txt and images/
  a folder of data files  parquet/arrow/csv/jsonl, e.g. the hub's `data/train-00000-of-00001.parquet`
  an image folder         `[<split>/]<class>/<image>`, or images with `metadata.csv`/`metadata.jsonl`
  hf:OWNER/NAME           a Hugging Face hub dataset (`OWNER/NAME` alone when no such path exists)

Files and hub datasets are read through `datasets` (its imagefolder, parquet and webdataset builders), streamed
with `stream` (tar shards given to pre-training always stream). Labels are found as `columns.py` says, the
same for every layout and every split of one dataset (string labels get one vocabulary for all splits).
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import VitxError, first_line
from ..spec import parse_spec
from .columns import SPLITS, Columns, require_classes, split_name
from .procedural import EMBEDDED
from .release import is_release, open_release
from .sources import HFImageSource, column_values
from .streams import StreamSource, check_complete, is_shards, shard_files

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm")
TABLE_SUFFIXES = (".parquet", ".arrow", ".csv", ".jsonl", ".json", ".tsv")
CLASSNAMES = "classnames.txt"
HUB_FAILURE = ("cannot load '{path}' from the Hugging Face hub ({reason}); offline, download a copy where you have "
               "internet (hf download {path} --repo-type dataset --local-dir DIR) and pass that folder")


@dataclass
class DataOptions:
    """How to read a spec: which columns hold the image and the label, whether to stream."""

    label_key: str | None = None
    image_key: str | None = None
    stream: bool = False
    shuffle_buffer: int = 0
    image_size: int = 32  # embedded data is generated at this size
    seed: int = 0


@dataclass
class Opened:
    """A dataset opened once: its splits (vitx names) as sources, how it was read, and what its labels are."""

    origin: str
    layout: str
    sources: dict[str, Any] = field(default_factory=dict)  # 'train' / 'validation' / 'test' → source
    columns: Columns | None = None  # (None for embedded data and the VTAB-1k release)

    def split(self, name: str) -> Any:
        """The source of vitx split `name`, None when the data has none."""
        return self.sources.get(name)

    @property
    def num_classes(self) -> int | None:
        return self.sources["train"].num_classes

    @property
    def class_names(self) -> list[str] | None:
        return self.sources["train"].class_names

    def labels_described(self) -> str:
        return self.columns.describe() if self.columns is not None else (
            f"{self.num_classes} classes" if self.num_classes else "no labels")


def looks_like_data(spec: str) -> bool:
    """Whether a `--task` value names data rather than a registered task: a path that exists, hf:NAME, shards."""
    return spec.startswith(("hf:", "embedded:")) or is_shards(spec) or os.path.exists(os.path.expanduser(spec))


def open_data(spec: str, options: DataOptions | None = None) -> Opened:
    """Open every split of `spec` (see the module's docstring for the forms it takes)."""
    opts = options or DataOptions()
    if spec.startswith("embedded:"):
        return _open_embedded(spec, opts)
    # datasets' progress bars (preparing a split, resolving files) on a terminal only: in a log file or pipe
    # their carriage returns are noise, and an error would not be the only line printed
    if not sys.stderr.isatty():
        import datasets

        datasets.disable_progress_bars()
    if is_shards(spec):
        files = {split: shard_files(spec, split) for split in SPLITS}
        return open_shards({k: v for k, v in files.items() if v}, spec, opts, _classnames_near(spec, files))
    if spec.startswith(("/", "./", "../", "~")) or os.path.exists(spec):  # a path
        return _open_local(Path(spec).expanduser(), spec, opts)
    repo = spec[3:] if spec.startswith("hf:") else spec
    from ..hub import unreachable

    why = unreachable(datasets=True)  # (offline, or unreachable: then its cache only, at once, never a minute of retries)
    try:
        return _load(f"hf:{repo}", "hub", opts, None, repo, HUB_FAILURE)
    except VitxError as exc:
        if why is None:
            raise
        from ..hub import not_cached

        raise VitxError(HUB_FAILURE.format(path=repo, reason=not_cached(why, str(exc)))) from None


def open_source(spec: str, split: str = "train", image_size: int = 32, seed: int = 0, stream: bool = False,
                shuffle_buffer: int = 0, label_key: str | None = None, image_key: str | None = None) -> Any:
    """One split of `spec`; None when an optional split is absent. 'validation' falls back to the test split."""
    opened = open_data(spec, DataOptions(label_key=label_key, image_key=image_key, stream=stream or is_shards(spec),
                                         shuffle_buffer=shuffle_buffer, image_size=image_size, seed=seed))
    found = opened.split(split)
    return opened.split("test") if found is None and split == "validation" else found


def open_labelled(spec: str, what: str, options: DataOptions | None = None) -> tuple[Any, Any]:
    """(train, test) of labelled, indexable data, for evaluations on frozen features (`eval fewshot`, the
    monitor); test is the test split, else the validation split. Refusals are one line that says why."""
    opened = open_data(spec, options)
    train, test = opened.split("train"), opened.split("test") or opened.split("validation")
    if test is None:
        raise VitxError(f"{what} {spec}: it has no test or validation split to evaluate on")
    if hasattr(train, "micro_batches"):
        raise VitxError(f"{what} {spec}: a stream cannot be drawn from by index; open it without --stream, or use a "
                        "save_to_disk copy or an image folder")
    require_classes(train, f"{what} {spec}")
    return train, test


# -- embedded ----------------------------------------------------------------------------------------------
def _open_embedded(spec: str, opts: DataOptions) -> Opened:
    name, options = parse_spec(spec[len("embedded:"):])
    if name not in EMBEDDED:
        raise VitxError(f"unknown embedded dataset '{name}'; choose from {', '.join(EMBEDDED)}")
    given = [flag for flag, value in (("--label-key", opts.label_key), ("--image-key", opts.image_key)) if value]
    if given:  # (recorded and ignored before: a run's config.json said it read a column it never had)
        raise VitxError(f"{given[0]} names a column of a dataset's table; embedded:{name} is generated, its images "
                        "and labels have no columns to choose: drop it")
    known = [f.name for f in dataclasses.fields(EMBEDDED[name]) if f.name not in ("split", "num_classes", "class_names")]
    unknown = sorted(set(options) - set(known) - {"eval_length"})
    if unknown:
        raise VitxError(f"embedded:{name} has no option '{unknown[0]}' (its options: {', '.join(known)}, eval_length)")
    options.setdefault("size", opts.image_size)
    if name != "digits":
        options.setdefault("seed", opts.seed)
    others = options.pop("eval_length", 0 if name == "digits" else 2_000)  # `length` sizes the training split only
    sources = {split: EMBEDDED[name](split=split, **(options if split == "train" else {**options, "length": others}))
               for split in SPLITS}
    return Opened(spec, "embedded", sources)


# -- local folders and files -------------------------------------------------------------------------------
def _has(path: Path, suffixes: tuple[str, ...]) -> bool:
    return any(p.suffix.lower() in suffixes for p in path.rglob("*") if p.is_file())


def _open_local(path: Path, spec: str, opts: DataOptions) -> Opened:
    if not path.exists():
        raise VitxError(f"data path {path} does not exist")
    if path.is_file():
        if path.suffix.lower() in TABLE_SUFFIXES:
            builder = {".jsonl": "json", ".tsv": "csv"}.get(path.suffix.lower(), path.suffix.lower()[1:])
            return _load(spec, "data file", opts, path.parent, builder, data_files={"train": str(path)})
        raise VitxError(f"data path {path} is a file; expected a folder (image folder, save_to_disk, parquet files, "
                        "tar shards), a data file (.parquet, .arrow, .csv, .jsonl) or tar shards")
    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        return _open_saved(path, spec, opts)
    if is_release(path):
        lists = open_release(path)
        return Opened(spec, "VTAB-1k folder release", {"train": lists["train"], "validation": lists["val"],
                                                        "test": lists["test"], "train_val": lists["train_val"]})
    if _has(path, IMAGE_SUFFIXES):
        return _open_image_folder(path, spec, opts)
    if _has(path, TABLE_SUFFIXES):
        return _load(spec, "data files", opts, path, str(path))
    raise VitxError(f"{path} holds no images, data files or tar shards (expected an image folder "
                    f"[<split>/]<class>/<image>, images with metadata.csv, a save_to_disk folder, parquet files or "
                    f"*.tar shards)")


def _open_saved(path: Path, spec: str, opts: DataOptions) -> Opened:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise VitxError(f"cannot read dataset folder {path}: {first_line(exc)}") from None
    if not isinstance(loaded, datasets.DatasetDict):
        loaded = datasets.DatasetDict({"train": loaded})  # a lone Dataset is the train split
    return _sources(loaded, spec, "save_to_disk", opts, _read_classnames(path))


def _open_image_folder(path: Path, spec: str, opts: DataOptions) -> Opened:
    import datasets

    if opts.stream:
        return _load(spec, "image folder", opts, path, "imagefolder", data_dir=str(path))
    try:
        dd = datasets.load_dataset("imagefolder", data_dir=str(path))
    except Exception as exc:
        raise VitxError(f"cannot read image folder {path}: {first_line(exc)}") from None
    for split, ds in list(dd.items()):  # datasets drops a lone class's labels: keep them, so that a
        lone = _lone_class(path, split)  # classifier is told "one class" rather than "no labels"
        if lone is not None and "label" not in ds.features and not _has_metadata(path):
            dd[split] = ds.add_column("label", [0] * len(ds)).cast_column("label", datasets.ClassLabel(names=[lone]))
    return _sources(dd, spec, "image folder", opts, _read_classnames(path))


def _has_metadata(path: Path) -> bool:
    return any(p.name in ("metadata.csv", "metadata.jsonl", "metadata.parquet") for p in path.rglob("metadata.*"))


def _lone_class(path: Path, split: str) -> str | None:
    """The name of an image folder's only class folder (in the split's folder, when it has one), else None."""
    root = next((path / name for name in SPLITS.get(split, (split,)) if (path / name).is_dir()), path)
    classes = [d.name for d in root.iterdir() if d.is_dir()]
    return classes[0] if len(classes) == 1 else None


# -- through datasets ---------------------------------------------------------------------------------------
def _load(spec: str, layout: str, opts: DataOptions, folder: Path | None, path: str,
          failure: str = "cannot read {spec} ({layout}): {reason}", **kwargs: Any) -> Opened:
    """`datasets.load_dataset(path, **kwargs)`, map-style or streamed, as an `Opened`; a `classnames.txt` in
    `folder` (a local copy's) names the classes."""
    import datasets

    try:
        dd = datasets.load_dataset(path, streaming=opts.stream, **kwargs)
    except Exception as exc:
        raise VitxError(failure.format(spec=spec, layout=layout, path=path, reason=first_line(exc))) from None
    return _sources(dd, spec, layout, opts, _read_classnames(folder) if folder is not None else None)


def _splits(dd: Any, spec: str) -> dict[str, str]:
    """vitx split → the dataset's split name, for the splits it has; a lone unnamed split is the train split."""
    names = list(dd)
    found = {split: name for split in SPLITS if (name := split_name(names, split)) is not None}
    if "train" not in found and len(names) != 1:
        raise VitxError(f"{spec} has no train split (its splits: {', '.join(names)})")
    found.setdefault("train", names[0])
    return found


def _sources(dd: Any, spec: str, layout: str, opts: DataOptions, names: list[str] | None,
             scan: Callable[[tuple[str, ...]], Iterable[Any]] | None = None) -> Opened:
    """A DatasetDict → one source per split, sharing one `Columns` (one set of classes): an `HFImageSource` per
    split of a map-style one, a `StreamSource` per split of a streamed one."""
    import datasets

    found = _splits(dd, spec)
    streamed = isinstance(dd[found["train"]], datasets.IterableDataset)
    if streamed and dd[found["train"]].features is None:
        dd[found["train"]] = dd[found["train"]]._resolve_features()  # peeks at the first record

    def values(path: tuple[str, ...]) -> Iterable[Any]:  # read once, label column only where the format allows
        for name in found.values():
            if streamed:
                for row in dd[name].select_columns([path[0]]):
                    value = row[path[0]]
                    yield value.get(path[1]) if len(path) > 1 and isinstance(value, dict) else value
            else:
                yield from column_values(dd[name], path)

    columns = Columns(dd[found["train"]].features, spec, scan or values, opts.label_key, opts.image_key, names)
    if streamed:
        sources = {split: StreamSource(dd[name], f"{spec}:{name}", columns,
                                       opts.shuffle_buffer if split == "train" else 0) for split, name in found.items()}
        return Opened(spec, layout, sources, columns)
    for split, name in found.items():
        _same_columns(columns, dd[name].features, f"{spec}:{name}")
    sources = {split: HFImageSource(dd[name], f"{spec}:{name}" if len(found) > 1 else spec, columns)
               for split, name in found.items()}
    return Opened(spec, layout, sources, columns)


def _same_columns(columns: Columns, features: Any, where: str) -> None:
    """Every split must hold the train split's image and label columns, with the same class names."""
    if columns.image_key not in features:
        raise VitxError(f"{where} has no '{columns.image_key}' column, which the train split's images are in")
    if columns.label_path is None:
        return
    head = columns.label_path[0]
    if head not in features:
        raise VitxError(f"{where} has no '{head}' column, which the train split's labels are in")
    mine = getattr(features[head], "names", None)
    if columns.kind == "classlabel" and mine is not None and list(mine) != list(columns.class_names or []):
        raise VitxError(f"{where} names its classes differently from the train split ({', '.join(mine[:5])}... "
                        f"against {', '.join((columns.class_names or [])[:5])}...): its labels would be misread")


# -- WebDataset shards --------------------------------------------------------------------------------------
def open_shards(files: dict[str, list[str]], spec: str, opts: DataOptions,
                names: list[str] | None = None) -> Opened:
    """WebDataset shards (`files` per vitx split), through datasets' webdataset builder."""
    import datasets

    every = [f for shards in files.values() for f in shards]
    check_complete(every)
    remote = any("://" in f for f in every)
    try:
        dd = datasets.load_dataset("webdataset", data_files=files, streaming=opts.stream)
    except Exception as exc:
        hint = ("; offline, download them where you have internet (hf download NAME --repo-type dataset "
                "--local-dir DIR) and pass DIR") if remote else ""
        raise VitxError(f"cannot read the shards {spec}: {first_line(exc)}{hint}") from None
    if not opts.stream:
        return _sources(dd, spec, "WebDataset shards", opts, names)
    scan = None if remote else (lambda path: tar_label_values(every, path))
    return dataclasses.replace(_sources(dd, f"{len(every)} shards at {spec}", "WebDataset shards", opts, names, scan),
                               origin=spec)


def tar_label_values(files: list[str], path: tuple[str, ...]) -> Iterable[Any]:
    """Every sample's label member (`.cls`, `.txt`, `.json`) in local tar shards, skipping the images' bytes
    (tarfile seeks past them): counting classes costs a read of the headers, not of the data."""
    extension = path[0].lower()
    for name in files:
        with tarfile.open(name, mode="r:") as tar:
            for member in tar:
                base = member.name.rsplit("/", 1)[-1]
                if not member.isfile() or "." not in base or base.split(".", 1)[1].lower() != extension:
                    continue
                raw = tar.extractfile(member).read()
                if extension in ("json", "jsn"):
                    value = json.loads(raw)
                    yield value.get(path[1]) if len(path) > 1 and isinstance(value, dict) else value
                else:
                    text = raw.decode("utf-8").strip()
                    yield int(text) if extension in ("cls", "cls2", "index", "inx", "id") else text


def _classnames_near(spec: str, files: dict[str, list[str] | None]) -> list[str] | None:
    """A `classnames.txt` beside the shards: in the train shards' folder or the one above it (clip-benchmark's
    layout: `<root>/classnames.txt`, `<root>/train/*.tar`)."""
    train = files.get("train") or []
    if not train or "://" in train[0]:
        return None
    folder = Path(train[0]).expanduser().parent
    return _read_classnames(folder) or _read_classnames(folder.parent)


def _read_classnames(folder: Path) -> list[str] | None:
    """A `classnames.txt` (one name per line) in `folder`, or in its train split's folder."""
    candidates = [folder / CLASSNAMES] + [folder / name / CLASSNAMES for name in SPLITS["train"]]
    path = next((p for p in candidates if p.is_file()), None)
    names = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()] if path else []
    return names or None


__all__ = ["DataOptions", "Opened", "looks_like_data", "open_data", "open_labelled", "open_shards", "open_source"]
