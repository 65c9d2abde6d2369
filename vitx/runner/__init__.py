"""The runner: config, optimiser and schedule, run directory, reporting, and the one training loop."""
from ..lazy import lazy_exports
from .config import PretrainConfig

__all__ = ["PretrainConfig", "Setup", "Trainer", "build", "pretrain", "resolve_config"]
__getattr__, __dir__ = lazy_exports(__name__, {name: ".loop" for name in __all__[1:]})
