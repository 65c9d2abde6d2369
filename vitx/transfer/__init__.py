"""Transfer: starting points, the VTAB-1k protocol, few-shot linear evaluation."""
from ..lazy import lazy_exports
from .config import TransferConfig

__all__ = ["TransferConfig", "extract_features", "fewshot_accuracy", "fit_least_squares", "load_start",
           "run_task", "sample_shots", "transfer"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "extract_features": ".fewshot", "fewshot_accuracy": ".fewshot", "fit_least_squares": ".fewshot",
    "sample_shots": ".fewshot", "run_task": ".protocol", "transfer": ".protocol", "load_start": ".start"})
