"""The runner: config, set-up, launch, the one training loop (loop.py: a step in stepping.py, validation and
the monitor in evaluating.py, checkpoints in saving.py), randomness, preemption, reporting; `entry.py` is
`vitx pretrain`'s entry (`pretrain`)."""
from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .config import PretrainConfig

# all lazy: `import vitx` imports preemption.py from its first line (a stop signal is one line from then on),
# which must not wait for the settings
__all__ = ["PretrainConfig", "Setup", "Trainer", "build", "pretrain", "resolve_config"]
__getattr__, __dir__ = lazy_exports(__name__, {"PretrainConfig": ".config", "Setup": ".setup", "build": ".setup",
                                               "resolve_config": ".setup", "Trainer": ".loop", "pretrain": ".entry"})
