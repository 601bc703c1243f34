"""Benchmarks: durable_nb side by side with its peers, interleaved, reported as ratios (``python -m benchmarks``)."""
