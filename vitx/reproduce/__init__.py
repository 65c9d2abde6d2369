"""A small-scale reproduction of the paper's findings, run with vitx on embedded data (`vitx reproduce`)."""
from .pipeline import reproduce
from .plan import CPU, QUICK, Plan

__all__ = ["CPU", "Plan", "QUICK", "reproduce"]
