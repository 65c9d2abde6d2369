"""The data layer: sources (embedded, local, hub) → preprocessing → deterministic, sharded loaders."""
from .memory import TensorSplit, decode_split, memory_batches, memory_eval_batches
from .loader import StreamSampler, eval_loader, train_loader
from .procedural import EMBEDDED, DeadLeaves, Digits, Shapes
from .sources import HFImageSource, ImageSource, open_source
from .transforms import Preprocess

__all__ = ["EMBEDDED", "DeadLeaves", "Digits", "Shapes", "HFImageSource", "ImageSource", "Preprocess",
           "StreamSampler", "TensorSplit", "decode_split", "eval_loader", "memory_batches", "memory_eval_batches", "open_source", "train_loader"]
