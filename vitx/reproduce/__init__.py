"""A small-scale reproduction of the paper's findings, run with vitx on embedded data (`vitx reproduce`)."""
from ..lazy import lazy_exports
from .plan import CPU, GPU, PLANS, QUICK, Plan, Pretraining

__all__ = ["CPU", "GPU", "PLANS", "Plan", "Pretraining", "QUICK", "reproduce"]
__getattr__, __dir__ = lazy_exports(__name__, {"reproduce": ".pipeline"})
