"""A small-scale reproduction of the paper's findings, run with vitx on embedded data (`vitx reproduce`)."""
from ..lazy import lazy_exports
from .plan import CPU, QUICK, Plan

__all__ = ["CPU", "Plan", "QUICK", "reproduce"]
__getattr__, __dir__ = lazy_exports(__name__, {"reproduce": ".pipeline"})
