"""Frozen-feature evaluation, below the runner and the transfer: what is read (`representation.py`), how it
is extracted (`features.py`), the probes on it (few-shot least squares `fewshot.py`, kNN `knn.py`), and the
monitor that runs them during training (`monitor.py`). `vitx eval` and the closed-form transfer call the same
code."""
from ..lazy import lazy_exports

FEWSHOT_REG = 2.0 ** 10  # big_vision's L2 regularisation of the few-shot least-squares head (λ)
FEATURES = ("pre-logits", "backbone", "patch-mean")  # what frozen-feature evaluation reads (representation.py)
AUTO = "auto"  # the features the start's objective trains (Objective.features, recorded in its config.json)

__all__ = ["FEATURES", "FEWSHOT_REG", "Evaluator", "Monitors", "extract_features", "fewshot_accuracy", "fit_least_squares",
           "knn_accuracy", "read_as", "representation", "sample_shots"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "read_as": ".representation", "representation": ".representation",
    "extract_features": ".features", "fewshot_accuracy": ".fewshot", "fit_least_squares": ".fewshot",
    "sample_shots": ".fewshot", "knn_accuracy": ".knn", "Evaluator": ".monitor", "Monitors": ".monitor"})
