"""Runs inside a kernel (``runpy.run_path``): fingerprints of every user variable, printed as one JSON line.

The harness (``benchmarks/realnb.py``) compares these fingerprints between a plain run of a notebook
and its durable runs. Nothing here imports durable_nb: it looks at the namespace as the user sees it.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import types
from typing import Any

MARKER = "REALNB-FINGERPRINT "

# IPython's own names: the history (_, __, ___, _i, _ii, _iii, _iN, _N) and its bookkeeping.
_IPYTHON_NAMES = re.compile(r"^(_{1,3}|_i{1,3}|_i\d+|_\d+|_ih|_oh|_dh|In|Out|get_ipython|exit|quit)$")
_MAX_DEPTH = 40
_MAX_PARTS = 200
# Libraries whose objects are compared attribute by attribute rather than by their pickle (a
# seaborn grid holds a figure, whose pickle differs from run to run; its parts do not).
_BY_ATTRIBUTE = frozenset({"sklearn", "statsmodels", "patsy", "scipy", "seaborn"})


def _sha(*chunks: bytes | str) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk)
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _is_estimator(value: Any) -> bool:
    return (
        not isinstance(value, type)
        and hasattr(value, "get_params")
        and hasattr(value, "fit")
        and type(value).__module__.startswith("sklearn")
    )


def _fitted(value: Any) -> dict[str, Any]:
    """The fitted attributes of an estimator: public names ending with one underscore."""
    try:
        names = vars(value)
    except TypeError:
        return {}
    return {n: v for n, v in names.items() if n.endswith("_") and not n.startswith("_") and not n.endswith("__")}


class _Hasher:
    """Recursive, memoized digests of values (by identity within one probe)."""

    def __init__(self) -> None:
        self.memo: dict[int, str] = {}
        self.active: set[int] = set()
        self.keep: list[Any] = []  # keeps memoized objects alive, so their ids are not reused
        self.globals_of: dict[str, dict[int, str]] = {}  # module name -> its globals' names by id

    def digest(self, value: Any, depth: int = 0) -> str:
        """A short hex digest of one value."""
        key = id(value)
        if key in self.memo:
            return self.memo[key]
        if key in self.active or depth > _MAX_DEPTH:
            return _sha("cycle-or-deep", _type_name(value))
        self.active.add(key)
        try:
            result = self._compute(value, depth)
        except Exception as error:  # noqa: BLE001 - a value that cannot be fingerprinted is reported as such
            result = _sha("error", _type_name(value), type(error).__name__)
        finally:
            self.active.discard(key)
        self.memo[key] = result
        self.keep.append(value)
        return result

    def _compute(self, value: Any, depth: int) -> str:
        name = _type_name(value)
        if value is None or isinstance(value, bool | int | float | complex | str | bytes):
            return _sha(name, repr(value))
        if isinstance(value, types.ModuleType):
            return _sha("module", value.__name__)
        if isinstance(value, type | types.FunctionType | types.BuiltinFunctionType | types.MethodType):
            return _sha("callable", qualified(value))
        numpy = _module("numpy")
        if numpy is not None:
            if isinstance(value, numpy.generic):
                return _sha(name, repr(value))
            if isinstance(value, numpy.ndarray):
                return self._array(value, depth)
        pandas = _module("pandas")
        if pandas is not None and isinstance(value, pandas.DataFrame | pandas.Series | pandas.Index):
            return _sha(name, repr(sorted(self.pandas_parts(value, depth).items())))
        if _is_estimator(value):
            return _sha(name, repr(sorted(self.estimator_parts(value, depth).items())))
        drawn = self.matplotlib_parts(value, depth)
        if drawn is not None:
            return _sha(name, repr(sorted(drawn.items())))
        held = self.module_global(value)
        if held is not None:
            # A library's singleton (a prediction's ``dist``, ``scipy.stats.t``): which object it is,
            # as for a class or function. Its state is the library's (numpy's global random state
            # inside it), not the value's.
            return _sha("module global", held)
        if isinstance(value, list | tuple):
            return _sha(name, *[self.digest(v, depth + 1) for v in value])
        if isinstance(value, dict):
            return _sha(name, *[f"{self.digest(k, depth + 1)}={self.digest(v, depth + 1)}" for k, v in value.items()])
        if isinstance(value, set | frozenset):
            return _sha(name, *sorted(self.digest(v, depth + 1) for v in value))
        if isinstance(value, range | slice):
            return _sha(name, repr(value))
        home = type(value).__module__
        # A class the notebook defined (a custom estimator or likelihood model) too: its instances
        # pickle by the same memo, and the restored class is another object than the one pickled.
        by_attribute = (
            home.split(".")[0] in _BY_ATTRIBUTE
            or home == "__main__"
            or type(value) is types.SimpleNamespace
            # A vectorized method (scipy's distributions hold several): its pickle holds the instance
            # its function is bound to, and with it numpy's global random state, which is not its own.
            or (numpy is not None and isinstance(value, numpy.vectorize))
        )
        if by_attribute and getattr(value, "__dict__", None):
            # A scikit-learn display, a statsmodels model or result, a scipy interpolator (an isotonic
            # fit builds one again on unpickling), a namespace of frames (a state space result's
            # ``_states``): attribute by attribute, since plain pickle does not give the same bytes
            # after a round trip. Its memo writes an object met twice once: equal strings or dtypes shared
            # by two parts read apart from equal ones that are not, which no program can tell from a value.
            return _sha(name, *[f"{k}={self.digest(v, depth + 1)}" for k, v in sorted(vars(value).items())])
        if by_attribute:
            # A compiled class of the library (a KDTree and its distance metric): what it pickles to,
            # part by part, for the same reason: its arrays' equal dtypes are shared or not by chance.
            return _sha(name, self.digest(_reduced(value), depth + 1))
        return _sha(name, _pickled(value))

    def module_global(self, value: Any) -> str | None:
        """``module.name`` if the module of the value's class holds the value as a global, else None."""
        module = _module(type(value).__module__)
        if module is None or type(value).__module__ in ("builtins", "__main__"):
            return None
        names = self.globals_of.get(module.__name__)
        if names is None:
            names = self.globals_of[module.__name__] = {id(v): k for k, v in vars(module).items()}
        name = names.get(id(value))
        return f"{module.__name__}.{name}" if name is not None and vars(module).get(name) is value else None

    def _array(self, value: Any, depth: int) -> str:
        if value.dtype.hasobject:
            return _sha("ndarray", repr(value.shape), "object", *[self.digest(v, depth + 1) for v in value.ravel()])
        import numpy

        return _sha("ndarray", repr(value.shape), value.dtype.str, numpy.ascontiguousarray(value).tobytes())

    def pandas_parts(self, value: Any, depth: int) -> dict[str, str]:
        """Digests of a pandas object's index, columns or name, and values (per column for a frame)."""
        import numpy

        pandas = _module("pandas")
        assert pandas is not None
        parts: dict[str, str] = {}
        if isinstance(value, pandas.Index):
            parts["names"] = self.digest(list(value.names), depth + 1)
            parts["dtype"] = _sha(str(value.dtype))
            parts["values"] = self.digest(numpy.asarray(value.to_numpy()), depth + 1)
            return parts
        parts["index"] = self.digest(value.index, depth + 1)
        if isinstance(value, pandas.Series):
            parts["name"] = self.digest(value.name, depth + 1)
            parts["dtype"] = _sha(str(value.dtype))
            parts["values"] = self.digest(numpy.asarray(value.to_numpy()), depth + 1)
            return parts
        parts["columns"] = self.digest(value.columns, depth + 1)
        for position, column in enumerate(value.columns):
            series = value.iloc[:, position]
            parts[f"column {column}"] = _sha(
                str(series.dtype), self.digest(numpy.asarray(series.to_numpy()), depth + 1)
            )
        return parts

    def matplotlib_parts(self, value: Any, depth: int) -> dict[str, str] | None:
        """What a figure, axes, line or text shows (not matplotlib's private state); None for anything else."""
        figure = _module("matplotlib.figure")
        axes = _module("matplotlib.axes")
        text = _module("matplotlib.text")
        lines = _module("matplotlib.lines")
        if figure is not None and isinstance(value, figure.Figure):
            suptitle = value.get_suptitle() if hasattr(value, "get_suptitle") else ""
            return {
                "size": _sha(repr(tuple(value.get_size_inches())), repr(value.dpi), suptitle),
                "axes": self.digest(list(value.axes), depth + 1),
                "pixels": _sha(_rendered(value)),
            }
        colors = _module("matplotlib.colors")
        if colors is not None and isinstance(value, colors.Colormap):
            # Its colours, not its lookup table, which matplotlib fills on first use (a restored
            # colormap not yet used has none).
            numpy = _module("numpy")
            return {
                "name": _sha(str(value.name), repr(value.N)),
                "colors": self.digest(value(numpy.linspace(0.0, 1.0, value.N)), depth + 1),
                "extremes": self.digest((value.get_under(), value.get_over(), value.get_bad()), depth + 1),
            }
        if axes is not None and isinstance(value, axes.Axes):
            legend = value.get_legend()
            return {
                "titles": _sha(*(value.get_title(loc) for loc in ("left", "center", "right"))),
                "labels": _sha(value.get_xlabel(), value.get_ylabel()),
                "limits": _sha(repr(value.get_xlim()), repr(value.get_ylim()), value.get_xscale(), value.get_yscale()),
                "position": _sha(repr(tuple(value.get_position().bounds))),
                "lines": self.digest([self._line(line) for line in value.get_lines()], depth + 1),
                "images": self.digest([image.get_array() for image in value.get_images()], depth + 1),
                "collections": self.digest([c.get_offsets() for c in value.collections], depth + 1),
                "texts": _sha(*(t.get_text() for t in value.texts)),
                "legend": _sha(*(t.get_text() for t in legend.get_texts())) if legend is not None else _sha("none"),
            }
        if text is not None and isinstance(value, text.Text):
            return {"text": _sha(value.get_text(), repr(value.get_position()))}
        if lines is not None and isinstance(value, lines.Line2D):
            return {"line": self.digest(self._line(value), depth + 1)}
        collections = _module("matplotlib.collections")
        if collections is not None and isinstance(value, collections.Collection):
            return {
                "offsets": self.digest(value.get_offsets(), depth + 1),
                "array": self.digest(value.get_array(), depth + 1),
                "colors": self.digest((value.get_facecolor(), value.get_edgecolor()), depth + 1),
                "paths": self.digest([path.vertices for path in value.get_paths()], depth + 1),
                "label": _sha(str(value.get_label())),
            }
        artist = _module("matplotlib.artist")
        if artist is not None and isinstance(value, artist.Artist):
            # Any other artist: its plain properties (numbers, text, arrays), not matplotlib's private state.
            return {k: self.digest(v, depth + 1) for k, v in sorted(value.properties().items()) if _plain(v)}
        return None

    def _line(self, line: Any) -> tuple[Any, ...]:
        return (line.get_xydata(), str(line.get_color()), str(line.get_linestyle()), str(line.get_label()))

    def estimator_parts(self, value: Any, depth: int) -> dict[str, str]:
        """Digests of an estimator's parameters and of each of its fitted attributes."""
        parts = {"params": self.digest(value.get_params(deep=False), depth + 1)}
        for attribute, item in sorted(_fitted(value).items()):
            parts[attribute] = self.digest(item, depth + 1)
        return parts

    def describe(self, value: Any) -> dict[str, Any]:
        """The fingerprint of one variable: its type, its digest and, where useful, its parts' digests."""
        entry: dict[str, Any] = {"type": _type_name(value), "hash": self.digest(value)}
        parts: dict[str, str] = {}
        try:
            pandas = _module("pandas")
            if pandas is not None and isinstance(value, pandas.DataFrame | pandas.Series | pandas.Index):
                parts = self.pandas_parts(value, 1)
            elif _is_estimator(value):
                parts = self.estimator_parts(value, 1)
            elif (drawn := self.matplotlib_parts(value, 1)) is not None:
                parts = drawn
            elif isinstance(value, dict):
                parts = {repr(k)[:60]: self.digest(v, 1) for k, v in value.items()}
            elif isinstance(value, list | tuple) and not isinstance(value, str):
                parts = {f"[{i}]": self.digest(v, 1) for i, v in enumerate(value)}
            elif not isinstance(value, type | types.FunctionType) and hasattr(value, "__dict__"):
                parts = {f".{k}": self.digest(v, 1) for k, v in vars(value).items()}
        except Exception:  # noqa: BLE001 - parts are a diagnostic; the digest above still counts
            parts = {}
        if parts:
            entry["parts"] = dict(list(parts.items())[:_MAX_PARTS])
        if isinstance(value, bool | int | float | str) or value is None:
            entry["repr"] = repr(value)[:80]
        return entry


def _module(name: str) -> Any:
    import sys

    return sys.modules.get(name)


def _plain(value: Any) -> bool:
    """Numbers, text, arrays, and tuples or lists of them."""
    numpy = _module("numpy")
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if numpy is not None and isinstance(value, numpy.ndarray | numpy.generic):
        return True
    return isinstance(value, tuple | list) and all(_plain(v) for v in value)


def _rendered(figure: Any) -> bytes:
    """The figure's pixels, drawn by Agg at its own dpi (raw RGBA, no PNG metadata)."""
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="rgba")
    return buffer.getvalue()


def _reduced(value: Any) -> Any:
    """What pickling a value writes: its constructor, arguments and state (its pickle if it has none)."""
    try:
        return value.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - some values cannot be pickled; read as their pickle reads them
        return _pickled(value)


def _pickled(value: Any) -> bytes:
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # noqa: BLE001 - some values cannot be pickled; their type still counts
        return f"unpicklable {type(error).__name__}".encode()


def qualified(value: Any) -> str:
    """A function's or class's qualified name, with its module."""
    module = getattr(value, "__module__", None) or "?"
    return f"{module}.{getattr(value, '__qualname__', getattr(value, '__name__', repr(value)))}"


def user_variables(namespace: dict[str, Any], hidden: set[str]) -> dict[str, Any]:
    """The user's variables: no modules, no IPython history or bookkeeping, no dunder names."""
    return {
        name: value
        for name, value in namespace.items()
        if not (name.startswith("__") and name.endswith("__"))
        and not _IPYTHON_NAMES.match(name)
        and name not in hidden
        and not isinstance(value, types.ModuleType)
    }


def fingerprints(namespace: dict[str, Any], hidden: set[str]) -> dict[str, dict[str, Any]]:
    """Fingerprints of every user variable of a namespace, by name."""
    hasher = _Hasher()
    return {name: hasher.describe(value) for name, value in sorted(user_variables(namespace, hidden).items())}


def main() -> None:
    """Print the fingerprints of the running IPython shell's variables after the marker."""
    from IPython import get_ipython

    shell = get_ipython()
    hidden = set(getattr(shell, "user_ns_hidden", {}))
    print(MARKER + json.dumps(fingerprints(shell.user_ns, hidden), sort_keys=True), flush=True)


if __name__ == "__realnb_probe__":
    main()
