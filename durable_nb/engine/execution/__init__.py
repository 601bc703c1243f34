"""Running one body of user code, whether a workflow node or a notebook cell: the scope it runs in,
how it is attempted (retries, timeouts), ``@idempotent`` results, maps of items, and executors
(the owner side here, the worker side in ``remote``)."""
