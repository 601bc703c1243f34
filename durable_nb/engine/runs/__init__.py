"""A run's life around its execution: the handle users hold, its id and status, who owns it and
for how long, cancelling it, settling it after a failed write, recovering it after a crash, and
the module-level calls (approve, fork, cancel, resume) that work on a stored run by id."""
