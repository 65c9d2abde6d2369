"""Which column of a table holds the image and which the label, and what the labels are.

Every labelled source (image folders, `save_to_disk`, parquet, the hub, WebDataset shards; map-style or
streamed) is a `datasets` table, so labels are found one way for all of them:

  1. `--label-key NAME` when given (a column, or a field of a dict column: `json.label` or just `label`);
  2. else a `ClassLabel` column (image folders' class folders, most hub datasets): its names are the classes;
  3. else a column named label, labels, cls, class, fine_label, target or category (WebDataset's `.cls`), or such
     a field inside a dict column (WebDataset's `.json`), or WebDataset's `.txt`;
  4. integer labels have classes 0..max (named by a `classnames.txt` when there is one); string labels are
     mapped to their sorted names (or the `classnames.txt` order), which the run records in config.json.

One vocabulary of split names (`SPLITS`) serves every layout.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from PIL import Image

from ..errors import CorruptImageError, VitxError
from .decoding import EncodedImage

# vitx's split → the names a dataset may give it, first match wins (datasets' own data-file patterns)
SPLITS = {"train": ("train", "training"), "validation": ("validation", "valid", "val", "dev"),
          "test": ("test", "testing", "eval", "evaluation")}
IMAGE_NAMES = ("image", "img", "jpg", "jpeg", "png", "webp")
LABEL_NAMES = ("label", "labels", "cls", "class", "fine_label", "target", "category")
TEXT_LABEL = "txt"  # WebDataset's text member: a class name (or number) per sample, looked for last


def split_name(available: Iterable[str], split: str) -> str | None:
    """The name under which `available` holds vitx's `split` (None: it has none)."""
    names = list(available)
    return next((n for n in SPLITS[split] if n in names), None)


def _is_image(feature: Any) -> bool:
    from datasets import Image as HFImage

    return isinstance(feature, HFImage)


def _kind(feature: Any) -> str:
    """'classlabel', 'multilabel', 'int', 'str' or 'other' for a label feature."""
    from datasets import ClassLabel, Sequence, Value

    if isinstance(feature, ClassLabel):
        return "classlabel"
    if isinstance(feature, (Sequence, list)):
        inner = feature.feature if isinstance(feature, Sequence) else (feature[0] if feature else None)
        return "multilabel" if isinstance(inner, ClassLabel) else "other"
    if isinstance(feature, Value):
        if feature.dtype.startswith(("int", "uint")):
            return "int"
        if feature.dtype in ("string", "large_string"):
            return "str"
    return "other"


def describe_columns(features: Any) -> str:
    """`image, label, json.{label, caption}`: what a user can name with --image-key / --label-key."""
    parts = [f"{name}.{{{', '.join(feature)}}}" if isinstance(feature, dict) else name
             for name, feature in features.items() if not name.startswith("__")]
    return ", ".join(parts) or "none"


class Columns:
    """The image and label columns of a table (map-style or streamed), and its classes. `values(path)` gives
    every value of a label column (read once, when the classes must be counted or named); `class_names` are
    a `classnames.txt`'s, when the layout has one."""

    def __init__(self, features: Any, origin: str, values: Callable[[tuple[str, ...]], Iterable[Any]] | None = None,
                 label_key: str | None = None, image_key: str | None = None,
                 class_names: list[str] | None = None) -> None:
        self.origin, self.features = origin, features
        self.image_key = self._find_image(features, image_key)
        self.label_path = self._find_label(features, label_key)
        self.rejected = ""  # a column found by its name but holding no classes (floats, boxes, ...)
        if self.label_path is not None and label_key is None and _kind(self._feature()) == "other":
            self.rejected = f"'{'.'.join(self.label_path)}' holds {self._feature()}, not class numbers or names"
            self.label_path = None  # not labels: unlabelled data (fine for self-supervised objectives)
        self.num_classes: int | None = None
        self.class_names: list[str] | None = None
        self.multilabel = False
        self.index: dict[str, int] | None = None  # string label → class (string labels only)
        self.named_by_file = bool(class_names)  # classnames.txt sets the classes' order
        self.kind = "none"
        if self.label_path is not None:
            self._classes(values, class_names)

    # -- finding the columns ------------------------------------------------------------------------------
    def _find_image(self, features: Any, image_key: str | None) -> str:
        if image_key is not None:
            if image_key not in features:
                raise VitxError(f"{self.origin} has no column '{image_key}' for --image-key (columns: "
                                f"{describe_columns(features)})")
            return image_key
        found = next((k for k, f in features.items() if _is_image(f)), None)
        found = found or next((k for k in IMAGE_NAMES if k in features), None)
        if found is None:
            raise VitxError(f"{self.origin} has no image column (columns: {describe_columns(features)}); name it "
                            "with --image-key")
        return found

    def _find_label(self, features: Any, label_key: str | None) -> tuple[str, ...] | None:
        if label_key is not None:
            head, _, field = label_key.partition(".")
            if field and isinstance(features.get(head), dict) and field in features[head]:
                return head, field
            if label_key in features:
                return (label_key,)
            inside = [k for k, f in features.items() if isinstance(f, dict) and label_key in f]
            if inside:
                return inside[0], label_key
            raise VitxError(f"{self.origin} has no column or field '{label_key}' for --label-key (columns: "
                            f"{describe_columns(features)})")
        classlabel = next((k for k, f in features.items() if _kind(f) in ("classlabel", "multilabel")), None)
        if classlabel is not None:
            return (classlabel,)
        named = next((k for k in LABEL_NAMES if k in features and k != self.image_key), None)
        if named is not None:
            return (named,)
        nested = next(((key, k) for key, feature in features.items() if isinstance(feature, dict)
                       for k in LABEL_NAMES if k in feature), None)
        return nested or ((TEXT_LABEL,) if TEXT_LABEL in features else None)

    def _feature(self) -> Any:
        feature = self.features[self.label_path[0]]
        return feature[self.label_path[1]] if len(self.label_path) > 1 else feature

    def _classes(self, values: Callable[[tuple[str, ...]], Iterable[Any]] | None, names: list[str] | None) -> None:
        feature = self._feature()
        kind = _kind(feature)
        where = ".".join(self.label_path)
        if kind in ("classlabel", "multilabel"):  # the feature names the classes
            self.multilabel = kind == "multilabel"
            inner = (feature.feature if hasattr(feature, "feature") else feature[0]) if self.multilabel else feature
            self.kind = "multi-label" if self.multilabel else "classlabel"
            self.num_classes, self.class_names = inner.num_classes, list(inner.names)
            return
        if kind == "other":
            raise VitxError(f"{self.origin}: the label column '{where}' holds {feature}, not class numbers or names; "
                            "name the right one with --label-key")
        if names and kind == "int":  # classnames.txt says the classes: no need to read every label (a label
            self.kind, self.num_classes, self.class_names = "int", len(names), list(names)  # beyond them fails
            return  # when it is read, in to_class)
        if values is None:
            raise VitxError(f"{self.origin}: the classes of '{where}' cannot be counted without reading it; write "
                            "the class names, one per line, to classnames.txt beside the data")
        seen = [v for v in values(self.label_path) if v is not None]
        if not seen:
            raise VitxError(f"{self.origin}: the label column '{where}' is empty")
        if kind == "str" and all(str(v).strip().lstrip("-").isdigit() for v in seen):
            kind, seen = "int", [int(str(v).strip()) for v in seen]  # numbers written as text (a `.txt` of "3")
        self.kind = kind
        if kind == "int":
            low, high = min(int(v) for v in seen), max(int(v) for v in seen)
            if low < 0:
                raise VitxError(f"{self.origin}: label {low} in '{where}' is negative; labels are classes 0..K-1")
            if names and high >= len(names):
                raise VitxError(f"{self.origin}: label {high} in '{where}' but classnames.txt names "
                                f"{len(names)} classes")
            self.num_classes, self.class_names = (len(names), list(names)) if names else (high + 1, None)
            return
        present = sorted({str(v) for v in seen})
        unknown = [v for v in present if v not in names] if names else []
        if unknown:
            raise VitxError(f"{self.origin}: label '{unknown[0]}' in '{where}' is not in classnames.txt")
        present = list(names) if names else present
        self.num_classes, self.class_names = len(present), present
        self.index = {name: i for i, name in enumerate(present)}

    # -- reading rows -------------------------------------------------------------------------------------
    def describe(self) -> str:
        """How the labels were found, for a run's header and config.json."""
        if self.label_path is None:
            return "no labels"
        how = {"classlabel": "named classes", "int": "class numbers",
               "str": "class names, numbered " + ("as classnames.txt lists them" if self.named_by_file
                                                  else "in sorted order")}.get(self.kind, self.kind)
        if self.kind == "int" and self.named_by_file:
            how += ", named by classnames.txt"
        return f"'{'.'.join(self.label_path)}' ({how}, {self.num_classes} classes)"

    def undecoded(self, ds: Any) -> Any:
        """`ds` with its image column left as bytes: workers decode (and name a corrupt file)."""
        from datasets import Image as HFImage

        if _is_image(ds.features[self.image_key]):
            return ds.cast_column(self.image_key, HFImage(decode=False))
        return ds

    def label(self, row: dict[str, Any], name: str) -> Any:
        """A row's class (int), multi-hot list, or None when the table has no labels."""
        if self.label_path is None:
            return None
        value = row[self.label_path[0]]
        if len(self.label_path) > 1:
            value = (value or {}).get(self.label_path[1])
        return self.to_class(value, name)

    def to_class(self, value: Any, name: str) -> Any:
        """A stored label value → its class (int), or a multi-hot list for multi-label columns."""
        if value is None:
            raise VitxError(f"{name} has no label in '{'.'.join(self.label_path or ())}'")
        if self.multilabel:
            hot = [0] * int(self.num_classes)
            for k in value:
                hot[k] = 1
            return hot
        if self.index is not None:
            found = self.index.get(str(value))
            if found is None:
                raise VitxError(f"{name}: label '{value}' is not among the {len(self.index)} classes found")
            return found
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
        if self.num_classes is not None and not 0 <= number < self.num_classes:
            raise VitxError(f"{name}: label {number} is outside the {self.num_classes} classes (0..{self.num_classes - 1})")
        return number

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
        return image, self.label(row, name)

    def no_labels(self) -> str:
        """What was looked for, and how to point at the labels: for "needs labels" errors."""
        found = f" ({self.rejected})" if self.rejected else ""
        return (f"{self.origin} has no labels{found}: looked for a ClassLabel column (class folders), a column named "
                f"{', '.join(LABEL_NAMES)} or {TEXT_LABEL}, and such a field in a dict column (columns: "
                f"{describe_columns(self.features)}); name yours with --label-key")


def require_labels(source: Any, what: str) -> None:
    """Refuse an unlabelled source for `what` (a supervised objective, a transfer) in one line that says how to
    point at the labels."""
    if source.num_classes:
        return
    columns = getattr(source, "columns", None)
    detail = columns.no_labels() if isinstance(columns, Columns) else f"{getattr(source, 'origin', 'this dataset')} " \
        "has no labels"
    raise VitxError(f"{what} needs labelled images; {detail}")


def require_classes(source: Any, what: str) -> None:
    """Refuse a source a classifier cannot be trained or evaluated on: no labels, or a single class."""
    require_labels(source, what)
    if source.num_classes < 2:
        raise VitxError(f"{what} has one class ({(source.class_names or ['?'])[0]}); a classifier needs two or more")
