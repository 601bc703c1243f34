"""pandas views of runs and their history (pandas is imported only here)."""

from .frames import ahistory, aruns, history, runs

__all__ = ["ahistory", "aruns", "history", "runs"]
