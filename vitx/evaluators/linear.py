"""`vitx eval linear` and `--monitor-probes linear`: a linear head on frozen, cached features, lr × features
chosen on a held-out part of train, reported on test (DINO's SGD with MAE's BatchNorm; the maths:
`evaluation/sgd_probe.py`). Every feature choice is extracted in one forward pass (`Readouts`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..evaluation import AUTO, FORMER_FEATURES, LINEAR_BATCH, LINEAR_EPOCHS, LINEAR_LRS, READOUTS, VAL_FRACTION
from ..evaluation import feature_name
from ..evaluation.config import FrozenConfig
from ..settings import EVALUATION, MODEL, setting
from ..settings.groups import LIMITS
from ..settings.groups import TrainDraw
from . import Evaluator, register_evaluator

MONITOR_EPOCHS = 30  # a probe at every checkpoint: a few seconds on a CPU for 2,000 images


@dataclass
class LinearConfig(TrainDraw, FrozenConfig):
    """A linear head on frozen, cached features: lr × features chosen on a held-out part of train, reported on
    test (DINO's and DINOv2's linear evaluation, with MAE's BatchNorm)."""

    features: list[str] = setting(["all"], "Feature choices the probe picks from on validation: all (every one the start has), or some of pre-logits, cls-token (\\[class] token), patch-mean, cls-token+patch-mean, last4 (the \\[class] tokens of the last 4 blocks); auto: the start's own.", MODEL, choices=("all", AUTO, *READOUTS), renamed=FORMER_FEATURES)
    lrs: list[float] = setting(list(LINEAR_LRS), "SGD learning rates of the grid (one head each, trained side by side).", EVALUATION, above=0, limit=1000)
    epochs: int = setting(LINEAR_EPOCHS, "Passes over the cached train features.", EVALUATION, above=0, limit=100_000)
    batch_size: int = setting(LINEAR_BATCH, "Batch of features per SGD step.", EVALUATION, above=1, limit=10_000_000)
    batch_norm: bool = setting(True, "MAE's BatchNorm without affine before the head (one lr grid for features of any scale).", EVALUATION)
    val_fraction: float = setting(VAL_FRACTION, "Part of train held out to choose lr × features (stratified, seeded).", EVALUATION, above=0, below=1)
    seeds: list[int] = setting([0, 1, 2], "Seeds of the final head (its initialisation and batch order): mean ± s.d. on test.", EVALUATION, min=0, limit=LIMITS["seed"], example="0,1,2", distinct=True)


def linear_choices(cfg: LinearConfig, available: dict[str, slice]) -> list[str]:
    """The feature choices of --features that the start has (all: every one; auto: the start's own)."""
    from ..errors import VitxError
    from ..runs.start import start_features

    ordered = sorted(available, key=lambda name: READOUTS.index(name) if name in READOUTS else len(READOUTS))
    if "all" in cfg.features:
        return ordered
    own = start_features(cfg.start)
    own = own if own in available else "cls-token"  # pre-logits without a representation layer: the pooled output
    chosen = [own if name == "auto" else feature_name(name) for name in cfg.features]  # (a config made unchecked)
    missing = [name for name in chosen if name not in available]
    if missing:
        raise VitxError(f"--features {missing[0]} is not available for this start (it has {', '.join(ordered)})")
    return list(dict.fromkeys(chosen))


@register_evaluator("linear")
class Linear(Evaluator):
    """A linear probe: one SGD head per lr, side by side, on cached features."""

    config = LinearConfig
    summary = ("A linear probe on frozen features, extracted once: lr × features chosen on validation, test top-1 "
               "over seeds (MAE's and DINO's linear evaluation).")

    def reader(self, frozen: Any) -> Any:
        """Every feature choice the start has, side by side, from one forward pass."""
        from ..evaluation.representation import Readouts
        from ..runs.start import representation

        layer = representation(frozen.backbone, self.cfg.start, "pre-logits", self.cfg.use_ema).layer
        readouts = Readouts(frozen.backbone, layer)
        self.choices = linear_choices(self.cfg, readouts.slices)
        return readouts

    def evaluate(self, frozen: Any, model: Any, train: Any, test: Any, preprocess: Any) -> dict[str, Any]:
        from ..evaluation.sgd_probe import linear_probe

        cfg = self.cfg
        x_train, y_train, x_test, y_test = frozen.features(model, train, test, preprocess, cfg.train_samples)
        result = linear_probe(x_train, y_train, x_test, y_test, int(train.num_classes), model.slices, self.choices,
                              cfg.lrs, cfg.epochs, cfg.batch_size, cfg.batch_norm, cfg.val_fraction, cfg.seeds,
                              frozen.device)
        return {"features": result["features_chosen"], **result}

    def monitor(self, x_train: Any, y_train: Any, x_test: Any, y_test: Any, num_classes: int,
                device: Any) -> dict[str, float]:
        """`linear`: the lr grid, 30 epochs, the lr chosen on a held-out fifth of the draw, retrained, tested."""
        import torch

        from ..evaluation.sgd_probe import linear_probe

        with torch.enable_grad():
            probe = linear_probe(x_train, y_train, x_test, y_test, num_classes, {"f": slice(0, x_train.shape[1])},
                                 ["f"], epochs=MONITOR_EPOCHS, device=device)
        return {"linear": probe["test_top1"]}

    def table(self, result: dict[str, Any], console: Any) -> None:
        """Validation top-1 over the lr × features grid (the chosen point marked), then the chosen point's test
        top-1 over the seeds."""

        table = self.titled(f"linear probe: {result['data']} from {self.cfg.start} (val top-1 per features × lr)",
                            console)
        table.add_column("features")
        for lr in next(iter(result["grid"].values())):
            table.add_column(lr, justify="right")
        chosen = (result["features_chosen"], result["lr_chosen"])
        for name, row in result["grid"].items():
            table.add_row(name, *(f"{acc:.1%}" + (" *" if (name, float(lr)) == chosen else "")
                                  for lr, acc in row.items()))
        spread = f" ± {result['test_top1_std']:.2%}" if result["test_top1_std"] is not None else ""
        table.caption = (f"* chosen: {chosen[0]}, lr {chosen[1]:g} (val {result['val_top1']:.2%} on "
                         f"{result['val_samples']} held-out images) → test top-1 {result['test_top1']:.2%}{spread} "
                         f"over seeds {','.join(map(str, result['seeds']))}; {result['num_classes']} classes, chance "
                         f"{1 / result['num_classes']:.1%}; {result['train_samples']} + {result['val_samples']} "
                         f"train, {result['test_samples']} test images; {result['epochs']} epochs of batch "
                         f"{result['batch']}" + (", BatchNorm without affine" if result["batch_norm"] else ""))
        console.print(table)


__all__ = ["Linear", "LinearConfig", "linear_choices"]
