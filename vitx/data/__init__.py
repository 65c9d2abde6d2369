"""The data layer: sources (embedded, local, hub) → preprocessing → deterministic, sharded loaders."""
from .loader import StreamSampler, eval_loader, train_loader
from .procedural import EMBEDDED, DeadLeaves, Digits, Shapes
from .sources import HFImageSource, ImageSource, open_source
from .transforms import Preprocess

__all__ = ["EMBEDDED", "DeadLeaves", "Digits", "Shapes", "HFImageSource", "ImageSource", "Preprocess",
           "StreamSampler", "eval_loader", "open_source", "train_loader"]
