"""The runner: config, set-up, launch, the one training loop (loop.py: a step in stepping.py, validation and
the monitor in evaluating.py, checkpoints in saving.py), randomness, preemption, reporting; `entry.py` is
`vitx pretrain`'s entry (`pretrain`)."""
from ..lazy import lazy_exports
from .config import PretrainConfig

__all__ = ["PretrainConfig", "Setup", "Trainer", "build", "pretrain", "resolve_config"]
__getattr__, __dir__ = lazy_exports(__name__, {"Setup": ".setup", "build": ".setup", "resolve_config": ".setup",
                                               "Trainer": ".loop", "pretrain": ".entry"})
