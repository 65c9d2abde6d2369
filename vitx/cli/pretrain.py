"""`vitx pretrain`: pre-train a backbone with an objective through Accelerate. Its options are
`PretrainConfig`'s declared settings (vitx/settings.py)."""
from __future__ import annotations

from typing import Any, Optional

from ..recipe import resolve
from ..runner.config import PretrainConfig
from .options import command


def _run(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    chosen = resolve(PretrainConfig, "pretrain", recipe, sets, options)
    from ..runner import pretrain as run_pretrain  # torch, timm, accelerate: seconds, so only here

    run_pretrain(chosen, resume=resume)


pretrain = command(PretrainConfig, _run, "pretrain",
                   "Pre-train a ViT. Defaults: a 2-minute CPU demo (vit-nano/4, supervised, embedded shapes at 16px).")
