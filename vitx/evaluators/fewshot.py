"""`vitx eval fewshot` and `--monitor-probes fewshot`: big_vision's few-shot linear evaluation (paper §4), a
closed-form least-squares head on k frozen features per class, accuracy over seeded draws (the maths:
`evaluation/least_squares.py`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..evaluation import FEWSHOT_REG
from ..evaluation.config import FrozenConfig, Readout
from ..settings import EVALUATION, setting
from . import Evaluator, register_evaluator

MONITOR_SHOTS, MONITOR_SEEDS = (1, 10), (0, 1, 2)  # during training: 1- and 10-shot, 3 draws each


@dataclass
class FewshotConfig(Readout, FrozenConfig):
    """Few-shot linear evaluation of frozen features: big_vision's protocol (1/5/10/25 shots, 3 seeds, λ = 2¹⁰)."""

    shots: list[int] = setting([1, 5, 10, 25], "Images per class (unlike `vitx transfer --shots`, which counts all training images).", EVALUATION, above=0, says="are images per class and must be positive")
    draws: int = setting(3, "Draws of the shots per count, seeded 0..N-1 (a count: `vitx eval linear --seeds` and `vitx transfer --seeds` list seeds).", EVALUATION, above=0, formerly="--seeds")
    reg: float = setting(FEWSHOT_REG, "L2 regularisation of the least-squares head.", EVALUATION, above=0, says=f"must be positive (the paper's is {FEWSHOT_REG:g})")


@register_evaluator("fewshot")
class Fewshot(Evaluator):
    """Closed-form least-squares heads on k images per class (big_vision's fewshot evaluator)."""

    config = FewshotConfig
    summary = "Regularised least squares on frozen pre-logit features: accuracy at 1/5/10/25 shots over seeds."

    def check(self, frozen: Any, item: str, train: Any, test: Any) -> None:
        """Every class has the most shots asked for (before any dataset's features are computed)."""
        from ..data.sources import source_labels
        from ..evaluation.least_squares import require_shots

        require_shots(source_labels(train), int(train.num_classes), max(self.cfg.shots), f"{item}: ")

    def evaluate(self, frozen: Any, model: Any, train: Any, test: Any, preprocess: Any) -> dict[str, Any]:
        from ..evaluation.least_squares import evaluate_sources

        cfg = self.cfg  # features only of the images some (shots, seed) draw uses
        return evaluate_sources(model, train, test, preprocess, cfg.shots, range(cfg.draws), cfg.reg,
                                frozen.test_rows(test), workers=frozen.workers, device=frozen.device)

    def monitor(self, x_train: Any, y_train: Any, x_test: Any, y_test: Any, num_classes: int,
                device: Any) -> dict[str, float]:
        """`fewshot_<k>shot`: the mean over 3 draws, for the shot counts every class of the draw has."""
        import numpy as np

        from ..evaluation.least_squares import fewshot_accuracy

        counts = np.bincount(y_train, minlength=num_classes)
        shots = tuple(k for k in MONITOR_SHOTS if counts.min() >= k)
        accuracy = fewshot_accuracy(x_train, y_train, x_test, y_test, num_classes, shots, MONITOR_SEEDS)
        return {f"fewshot_{k}shot": float(np.mean(accs)) for k, accs in accuracy.items()}

    def table(self, result: dict[str, Any], console: Any) -> None:
        """Mean and per seed for each shot count."""
        from rich.markup import escape

        table = self.titled(f"few-shot linear evaluation: {result['data']} from {self.cfg.start}", console)
        for col in ("shots", "mean top-1", "per seed"):
            table.add_column(col, justify="right")
        for k, row in result["shots"].items():
            table.add_row(k, f"{row['mean']:.2%}", "  ".join(f"{a:.1%}" for a in row["per_seed"]))
        table.caption = (f"{result['num_classes']} classes, chance {1 / result['num_classes']:.1%}; "
                         f"{result['test_samples']} test images; L2 {self.cfg.reg:g}; {result['feature_dim']}-d "
                         f"features: {escape(result['features'])}")
        console.print(table)


__all__ = ["Fewshot", "FewshotConfig"]
