"""The data layer: one opener of every layout (`opener.py`; labels found by `columns.py`; seeded draws and
hold-outs in `draws.py`) → sources (map-style `sources.py`, `streams.py`, `memory.py`) → decoding →
preprocessing on uint8 → deterministic, sharded loaders of uint8 batches (normalised on the device)."""
from ..lazy import lazy_exports
from ..settings.groups import INTERPOLATIONS  # how images are resized (transforms.py); torch-free

_EXPORTS = {  # public name → the module that defines it, imported on first use
    **dict.fromkeys(["TensorSplit", "decode_split"], ".memory"),
    **dict.fromkeys(["Batches", "StreamSampler", "eval_loader", "first_sample_batch", "train_loader"], ".loader"),
    **dict.fromkeys(["EncodedImage", "decode"], ".decoding"),
    **dict.fromkeys(["EMBEDDED", "DeadLeaves", "Digits", "Shapes"], ".procedural"),
    **dict.fromkeys(["HFImageSource", "ImageSource"], ".sources"),
    **dict.fromkeys(["DataOptions", "Opened", "open_data", "open_source"], ".opener"),
    "Preprocess": ".transforms"}
__all__ = ["INTERPOLATIONS", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
