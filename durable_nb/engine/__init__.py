"""The engine: runs and their execution over a store. No IPython here.

Each subpackage owns one concern: ``runs`` (a run's handle, status, ownership, cancel,
recovery), ``state`` (values in the store), ``execution`` (running a body of user code:
scope, attempts, maps, executors), ``workflows`` (definition and the runner), ``cells``
(notebook runs), ``gates`` (pausing and deciding), ``forks`` and ``agents``. ``pickling``
stays at this path because values already stored name its restore functions by it; the
paths modules had before this grouping stay importable for the same reason (``moved``).
"""

from .moved import install

install()
