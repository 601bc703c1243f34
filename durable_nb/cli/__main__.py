"""``python -m durable_nb.cli``: the ``durable-nb`` command."""

from . import main

if __name__ == "__main__":
    raise SystemExit(main())
