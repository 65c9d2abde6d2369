"""The data layer: sources (embedded, local, hub) → preprocessing → deterministic, sharded loaders."""
from ..lazy import lazy_exports

__all__ = ["EMBEDDED", "DeadLeaves", "Digits", "Shapes", "HFImageSource", "ImageSource", "Preprocess",
           "StreamSampler", "TensorSplit", "decode_split", "eval_loader", "memory_batches", "memory_eval_batches",
           "open_source", "train_loader"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["TensorSplit", "decode_split", "memory_batches", "memory_eval_batches"], ".memory"),
    **dict.fromkeys(["StreamSampler", "eval_loader", "train_loader"], ".loader"),
    **dict.fromkeys(["EMBEDDED", "DeadLeaves", "Digits", "Shapes"], ".procedural"),
    **dict.fromkeys(["HFImageSource", "ImageSource", "open_source"], ".sources"),
    "Preprocess": ".transforms"})
