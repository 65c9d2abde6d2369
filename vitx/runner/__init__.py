"""The runner: config, set-up, launch, the one training loop, randomness, preemption, run directory, reporting."""
from ..lazy import lazy_exports
from .config import PretrainConfig

__all__ = ["PretrainConfig", "Setup", "Trainer", "build", "pretrain", "resolve_config"]
__getattr__, __dir__ = lazy_exports(__name__, {"Setup": ".setup", "build": ".setup", "resolve_config": ".setup",
                                               "Trainer": ".loop", "pretrain": ".loop"})
