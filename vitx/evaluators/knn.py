"""`vitx eval knn` and `--monitor-probes knn`: DINO's weighted k-nearest-neighbour classification of frozen
features (cosine similarity, votes weighted exp(sim / T); the maths: `evaluation/weighted_knn.py`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..console import say
from ..evaluation import KNN_K, KNN_TEMPERATURE
from ..evaluation.config import FrozenConfig, Readout
from ..settings import EVALUATION, setting
from ..settings.groups import TrainDraw
from . import Evaluator, register_evaluator


@dataclass
class KnnConfig(Readout, TrainDraw, FrozenConfig):
    """Weighted k-nearest-neighbour classification of frozen features: DINO's protocol (cosine similarity, votes
    weighted exp(sim / T), T = 0.07; k = 10, 20, 100, 200 as DINO reports)."""

    k: list[int] = setting([10, 20, 100, 200], "Neighbours that vote (each at most the train images).", EVALUATION, above=0, limit=1_000_000, says="are neighbour counts and must be positive")
    temperature: float = setting(KNN_TEMPERATURE, "Temperature T of the votes' weights exp(sim / T).", EVALUATION, above=0)


@register_evaluator("knn")
class Knn(Evaluator):
    """Weighted kNN top-1 for each k (DINO's protocol)."""

    config = KnnConfig
    summary = "Weighted k-nearest-neighbour classification of frozen features (DINO's protocol): top-1 for each k."

    def evaluate(self, frozen: Any, model: Any, train: Any, test: Any, preprocess: Any) -> dict[str, Any]:
        from ..evaluation.weighted_knn import knn_accuracy

        cfg = self.cfg
        x_train, y_train, x_test, y_test = frozen.features(model, train, test, preprocess, cfg.train_samples)
        classes = int(train.num_classes)
        used = {k: min(k, len(y_train)) for k in cfg.k}  # a vote has at most every train image: label what voted
        top1 = {str(k): knn_accuracy(x_train, y_train, x_test, y_test, classes, k, cfg.temperature)
                for k in dict.fromkeys(used.values())}
        capped = {str(k): n for k, n in used.items() if n != k}
        return {"top1": top1, "k_requested": list(cfg.k), **({"k_capped": capped} if capped else {}),
                "temperature": cfg.temperature, "train_samples": len(y_train), "test_samples": len(y_test),
                "num_classes": classes, "feature_dim": int(x_train.shape[1]),
                "protocol": "weighted kNN (DINO): cosine similarity, votes exp(sim / T)"}

    def monitor(self, x_train: Any, y_train: Any, x_test: Any, y_test: Any, num_classes: int,
                device: Any) -> dict[str, float]:
        """`knn`: the 20 nearest vote (the kNN monitor of lightly's and InstDisc's self-supervised runs)."""
        from ..evaluation.weighted_knn import knn_accuracy

        return {"knn": knn_accuracy(x_train, y_train, x_test, y_test, num_classes, KNN_K)}

    def table(self, result: dict[str, Any], console: Any) -> None:
        """A column for each k."""
        table = self.titled(f"weighted kNN: {result['data']} from {self.cfg.start} (test top-1)", console)
        for k in result["top1"]:
            table.add_column(f"k = {k}", justify="right")
        table.add_row(*(f"{top1:.2%}" for top1 in result["top1"].values()))
        console.print(table)
        say(console, f"{result['num_classes']} classes, chance {1 / result['num_classes']:.1%}; "
                     f"{result['train_samples']} train, {result['test_samples']} test images; "
                     f"T {result['temperature']:g}; {result['feature_dim']}-d features: {result['features']}")
        if result.get("k_capped"):  # --k above the train images: the vote used all of them, and says so
            say(console, f"--k {', '.join(result['k_capped'])}: more than the {result['train_samples']} train "
                         f"images, so k = {result['train_samples']} (every train image votes)")


__all__ = ["Knn", "KnnConfig"]
