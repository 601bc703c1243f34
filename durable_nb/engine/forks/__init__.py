"""Forks: a new run branched from any checkpoint of another, the typed overrides a person sets on
it (parsed as literals, never evaluated), and the values forks set along a notebook run's lineage."""
