"""Notebook runs: what a ``%%durable`` cell does (the plan), committing and restoring its values,
outputs and settings, the lineage of forks a run's cells were committed in, and which variables a
cell changed and how they are pickled so that shared objects stay shared."""
