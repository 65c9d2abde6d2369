"""Transfer: starting points, the VTAB-1k protocol, few-shot linear evaluation."""
from .config import TransferConfig
from .fewshot import extract_features, fewshot_accuracy, fit_least_squares, sample_shots
from .protocol import run_task, transfer
from .start import load_start

__all__ = ["TransferConfig", "extract_features", "fewshot_accuracy", "fit_least_squares", "load_start",
           "run_task", "sample_shots", "transfer"]
