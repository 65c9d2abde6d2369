"""Transfer: starting points and the VTAB-1k protocol (frozen-feature evaluation: `vitx.evaluation`'s maths and
`vitx.evaluators`, `vitx eval NAME`)."""
from ..lazy import lazy_exports
from .config import TransferConfig

__all__ = ["TransferConfig", "extract_features", "fewshot_accuracy", "fit_least_squares", "load_start",
           "run_task", "sample_shots", "transfer"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "extract_features": "..evaluation.features", "fewshot_accuracy": "..evaluation.least_squares",
    "fit_least_squares": "..evaluation.least_squares", "sample_shots": "..evaluation.least_squares", "run_task": ".protocol", "transfer": ".protocol", "load_start": "..runs.start"})
