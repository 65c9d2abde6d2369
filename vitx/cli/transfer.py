"""`vitx transfer`: the VTAB-1k protocol (or any N-shot transfer) from a checkpoint, timm, or scratch. Its
options are `TransferConfig`'s declared settings (vitx/settings.py)."""
from __future__ import annotations

from typing import Any, Optional

from ..recipe import resolve
from ..transfer.config import TransferConfig
from .options import command


def _run(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    chosen = resolve(TransferConfig, "transfer", recipe, sets, options)
    from ..transfer import transfer as run_transfer  # torch, timm, accelerate: seconds, so only here

    run_transfer(TransferConfig(**chosen), resume=resume)


transfer = command(TransferConfig, _run, "transfer",
                   "Transfer a pre-trained ViT: sweep, retrain, test (VTAB-1k protocol), print and save the results.")
