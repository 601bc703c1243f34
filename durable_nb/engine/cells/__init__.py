"""Notebook runs: what a ``%%durable`` cell does (the plan), committing and restoring its values,
outputs and settings, the lineage of forks a run's cells were committed in, and which variables a
cell changed and how they are pickled so that shared objects stay shared (and which need no
pickling to be known unchanged); and replays of a run from one cell, in background kernels."""
