"""The folder of notebooks a server may run: a request's path is confined to it, and outputs go beside it.

A path is refused (with what to do instead) when it is absolute, climbs with ``..``, leads out
of the folder through a symbolic link, lands in the outputs folder, names no ``.ipynb`` file,
or cannot be looked up at all (a symbolic link loop, a name longer than the file system allows);
a path that is well formed but names nothing is not found.
"""

from __future__ import annotations

import errno
from pathlib import Path, PurePosixPath

from ..errors import ConfigurationError
from .errors import NotebookNotFound, NotebookPathRefused

__all__ = ["OUTPUTS", "NotebookFolder"]

# The default outputs folder, inside the notebooks folder; a leading dot keeps it out of listings.
OUTPUTS = ".durable-nb-outputs"


def _shown(path: str) -> str:
    """The path for a message: a very long one is cut, so that an answer does not repeat kilobytes."""
    return repr(path) if len(path) <= 120 else f"{path[:60]!r}…{path[-40:]!r} ({len(path):,} characters)"


class NotebookFolder:
    """The notebooks folder (``root``) and where executed copies and logs go (``outputs``)."""

    def __init__(self, root: str | Path, outputs: str | Path | None = None) -> None:
        self.root = Path(root).expanduser().resolve()
        if not self.root.is_dir():
            raise ConfigurationError(f"--notebooks {root}: no such folder; give the folder that holds the notebooks.")
        self.outputs = Path(outputs).expanduser().resolve() if outputs is not None else self.root / OUTPUTS

    def notebook(self, path: str) -> Path:
        """Return the notebook at ``path`` (relative to the folder), resolved; refuse any other path."""
        if not path or any(ord(c) < 32 for c in path):
            raise NotebookPathRefused(
                f"Notebook path {path!r} is empty or holds control characters; give a path relative to the "
                "notebooks folder, such as reports/daily.ipynb."
            )
        pure = PurePosixPath(path)
        if pure.is_absolute() or path.startswith("~"):
            raise NotebookPathRefused(
                f"Notebook path {path!r} is absolute; give it relative to the notebooks folder (reports/daily.ipynb)."
            )
        if ".." in pure.parts:
            raise NotebookPathRefused(f"Notebook path {path!r} climbs with '..'; name a notebook inside the folder.")
        if pure.suffix != ".ipynb":
            raise NotebookPathRefused(f"{path!r} is not a notebook: only .ipynb files run; name one of those.")
        try:
            found = (self.root / pure).resolve()
            exists, is_file = found.exists(), found.is_file()
        except (OSError, RuntimeError) as error:  # a symbolic link loop (RuntimeError before 3.13), a name too long
            looped = isinstance(error, RuntimeError) or error.errno == errno.ELOOP
            reason = "a symbolic link loop" if looped else (error.strerror or str(error)).lower()
            raise NotebookPathRefused(
                f"Notebook path {_shown(path)} cannot be looked up: {reason}. Name a notebook inside the folder "
                "by a path of ordinary length, without symbolic links that point back at themselves."
            ) from None
        if not found.is_relative_to(self.root):
            raise NotebookPathRefused(
                f"Notebook path {path!r} leads out of the notebooks folder through a symbolic link; only notebooks "
                "inside the folder run. Copy the notebook into it instead."
            )
        if found.is_relative_to(self.outputs):
            raise NotebookPathRefused(
                f"{path!r} is an output this server wrote, not a notebook to run; run the notebook it came from."
            )
        if not exists:
            raise NotebookNotFound(
                f"No notebook {path!r} in the notebooks folder; check the path (relative to the folder, with its "
                "folders and the .ipynb ending)."
            )
        if not is_file:
            raise NotebookPathRefused(f"{path!r} is a folder, not a notebook; name an .ipynb file in it.")
        return found

    def relative(self, notebook: Path) -> str:
        """Return a resolved notebook's path relative to the folder, with forward slashes."""
        return notebook.relative_to(self.root).as_posix()

    def output(self, relative: str, run_id: str) -> Path:
        """Where the executed copy of ``relative``'s run ``run_id`` is written (its log and parameters beside it)."""
        pure = PurePosixPath(relative)
        return self.outputs.joinpath(*pure.parent.parts, f"{pure.stem}-{run_id}.ipynb")
