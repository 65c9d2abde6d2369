"""The commands whose options are their config's declared settings (vitx/settings.py, through `options.command`):
`vitx pretrain` (`PretrainConfig`), `vitx transfer` (`TransferConfig`) and `vitx eval fewshot`, `knn` and `linear`
(`evaluation/config.py`: frozen-feature evaluation; the work is `transfer/frozen.py`'s, the tables `transfer/report.py`'s)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..evaluation.config import FewshotConfig, KnnConfig, LinearConfig
from ..recipe import resolve
from ..runner.config import PretrainConfig
from ..transfer.config import TransferConfig, with_protocol
from .options import command


def _pretrain(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    chosen = resolve(PretrainConfig, "pretrain", recipe, sets, options)
    from ..runner import pretrain as run_pretrain  # torch, timm, accelerate: seconds, so only here

    run_pretrain(chosen, resume=resume)


def _transfer(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    chosen = with_protocol(resolve(TransferConfig, "transfer", recipe, sets, options))
    from ..transfer import transfer as run_transfer  # torch, timm, accelerate: seconds, so only here

    run_transfer(TransferConfig(**chosen), resume=resume)


def _frozen(cls: type, evaluate: str, printer: str) -> Any:
    """An `eval` command's work: the config checked, `transfer.frozen.<evaluate>` run on one process, each
    dataset's table printed by `transfer.report.<printer>` as soon as it is done, the numbers written as JSON."""
    def run(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
        from ..runner.launch import is_main_process

        cfg = cls(**options).validate()
        if not is_main_process():  # under a launcher: one process does the (small) work, on its own device
            return
        from ..checkpoint import atomic_write_text
        from ..transfer import frozen, report

        results = getattr(frozen, evaluate)(cfg, each=lambda result: getattr(report, printer)(result, cfg))
        if cfg.output:
            Path(cfg.output).parent.mkdir(parents=True, exist_ok=True)
            body = results[0] if len(results) == 1 else {"from": cfg.start, "datasets": results}
            atomic_write_text(Path(cfg.output), json.dumps(body, indent=2))
    return run


pretrain = command(PretrainConfig, _pretrain, "pretrain",
                   "Pre-train a ViT. Defaults: a 2-minute CPU demo (vit-nano/4, supervised, embedded shapes at 16px).")
transfer = command(TransferConfig, _transfer, "transfer",
                   "Transfer a pre-trained ViT: sweep, retrain, test (VTAB-1k protocol), print and save the results.")
eval_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate frozen features.")
eval_app.command("fewshot")(command(
    FewshotConfig, _frozen(FewshotConfig, "evaluate_fewshot", "print_fewshot"), "fewshot",
    "Regularised least squares on frozen pre-logit features: accuracy at 1/5/10/25 shots over seeds.", training=False))
eval_app.command("knn")(command(
    KnnConfig, _frozen(KnnConfig, "evaluate_knn", "print_knn"), "knn",
    "Weighted k-nearest-neighbour classification of frozen features (DINO's protocol): top-1 for each k.",
    training=False))
eval_app.command("linear")(command(
    LinearConfig, _frozen(LinearConfig, "evaluate_linear", "print_linear"), "linear",
    "A linear probe on frozen features, extracted once: lr × features chosen on validation, test top-1 over seeds "
    "(MAE's and DINO's linear evaluation).", training=False))
