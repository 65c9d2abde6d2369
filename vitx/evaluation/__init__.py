"""Frozen-feature evaluation's maths, below the runner and the transfer: what is read (`representation.py`),
how it is extracted (`features.py`), the probes on it (big_vision's few-shot least squares `least_squares.py`,
DINO's weighted kNN `weighted_knn.py`, a linear probe trained by SGD `sgd_probe.py`), and the monitor that runs them during training (`monitor.py`). The evaluators that put
them to work, one file each (`vitx eval NAME`, `--monitor-probes NAME`), are in vitx/evaluators/; the
closed-form transfer calls the same code."""
from ..lazy import lazy_exports
from ..settings import Choices

FEWSHOT_REG = 2.0 ** 10  # big_vision's L2 regularisation of the few-shot least-squares head (λ)
FEATURES = ("pre-logits", "cls-token", "patch-mean")  # what frozen-feature evaluation reads (representation.py)
AUTO = "auto"  # the features the start's objective trains (Objective.features, recorded in its config.json)
READOUTS = ("pre-logits", "cls-token", "patch-mean", "cls-token+patch-mean", "last4")  # a linear probe's choices
# Former feature names → current: "backbone" named the [class] token as if it were the whole backbone. Users'
# commands and recipes, old runs' config.json and plugins' `Objective.features` still say it.
FORMER_FEATURES = {"backbone": "cls-token", "backbone+patch-mean": "cls-token+patch-mean"}
FEATURE_CHOICES = Choices((AUTO, *FEATURES), renamed=FORMER_FEATURES)  # a features setting's: auto or one of FEATURES
KNN_K, KNN_TEMPERATURE = 20, 0.07  # DINO's weighted kNN (weighted_knn.py)
LINEAR_LRS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)  # SGD on batch-normalised features (sgd_probe.py)
LINEAR_EPOCHS, LINEAR_BATCH, VAL_FRACTION = 100, 256, 0.2


def feature_name(name: str) -> str:
    """A feature's current name (one of FEATURES or READOUTS) for a former one; any other name as it is."""
    return FORMER_FEATURES.get(name, name)


__all__ = ["AUTO", "FEATURE_CHOICES", "FEATURES", "FEWSHOT_REG", "FORMER_FEATURES", "KNN_K", "KNN_TEMPERATURE", "LINEAR_BATCH", "LINEAR_EPOCHS",
           "LINEAR_LRS", "READOUTS", "VAL_FRACTION", "Probe", "Monitors", "extract_features", "fewshot_accuracy", "feature_name",
           "fit_least_squares", "knn_accuracy", "linear_probe", "read_as", "representation", "sample_shots"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "read_as": ".representation", "representation": ".representation",
    "extract_features": ".features", "fewshot_accuracy": ".least_squares",
    "fit_least_squares": ".least_squares", "sample_shots": ".least_squares", "knn_accuracy": ".weighted_knn",
    "linear_probe": ".sgd_probe", "Probe": ".monitor", "Monitors": ".monitor"})
