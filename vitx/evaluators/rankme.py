"""`vitx eval rankme` and `--monitor-probes rankme`: label-free figures of a representation, what tells a
collapse without labels. The effective rank of the features (RankMe, Garrido et al. 2023: the exponential of
the entropy of the normalised singular values of the (N, D) feature matrix; at most min(N, D), 1 when every
image maps to one direction) and the mean per-dimension standard deviation of the L2-normalised features
(SimSiam's collapse check: about 1/√D when they spread over the sphere, towards 0 when they collapse to a
point). Labels are read but never used."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..console import say
from ..evaluation.collapse import label_free  # the figures, beside the rules that read them
from ..evaluation.config import FrozenConfig
from . import Evaluator, register_evaluator


@dataclass
class RankConfig(FrozenConfig):
    """Label-free figures of a start's features on the images of one or several datasets (train and test)."""


@register_evaluator("rankme")
class RankMe(Evaluator):
    """Effective rank and spread of frozen features: what says a representation collapsed, without labels."""

    config = RankConfig
    summary = "Label-free: the effective rank of frozen features (RankMe) and the spread of the normalised features."

    def evaluate(self, frozen: Any, model: Any, train: Any, test: Any, preprocess: Any) -> dict[str, Any]:
        import numpy as np

        x_train, _, x_test, _ = frozen.features(model, train, test, preprocess, 0)
        features = np.concatenate([x_train, x_test])
        return {**label_free(features), "images": len(features), "feature_dim": int(features.shape[1])}

    def monitor(self, x_train: Any, y_train: Any, x_test: Any, y_test: Any, num_classes: int,
                device: Any) -> dict[str, float]:
        """`rankme`, `rankme_fraction`, `feature_std` on every monitor image (train and test draws)."""
        import numpy as np

        figures = label_free(np.concatenate([x_train, x_test]))
        return {k: figures[k] for k in ("rankme", "rankme_fraction", "feature_std")}

    def table(self, result: dict[str, Any], console: Any) -> None:
        say(console, f"label-free, {result['data']} from {self.cfg.start}: effective rank (RankMe) "
                     f"{result['rankme']:.1f} of at most {min(result['images'], result['feature_dim'])} "
                     f"({result['rankme_fraction']:.1%}); normalised features' s.d. per dimension "
                     f"{result['feature_std']:.4f} (spread evenly: {result['feature_std_spread']:.4f}, collapsed: 0); "
                     f"{result['images']} images, {result['feature_dim']}-d {result['features']}")


__all__ = ["RankConfig", "RankMe", "label_free"]
