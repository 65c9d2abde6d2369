"""The runner: config, optimiser and schedule, run directory, reporting, and the one training loop."""
from .config import PretrainConfig
from .loop import Setup, Trainer, build, pretrain, resolve_config

__all__ = ["PretrainConfig", "Setup", "Trainer", "build", "pretrain", "resolve_config"]
