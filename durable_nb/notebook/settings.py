"""Process-wide settings a cell can change outside its variables, recorded and re-applied on restore.

A cell such as ``sklearn.set_config(...)``, ``np.random.seed(0)`` or ``pd.set_option(...)``
defines no variable, yet every later cell depends on what it did. Each setting below is read
before and after a durable cell; what the cell changed is committed with it and applied again
when the cell is restored, in notebook order. The readings only look at libraries the kernel
has already imported.

Settings covered: scikit-learn's config; numpy's legacy global random state, error handling and
print options; Python's ``random``; pandas options; matplotlib's rcParams, registered styles and
colormaps, unit converters and date epoch; warning filters; logger levels; environment variables;
the working directory; ``sys.path``; PyTorch's random state and default dtype.

Each setting also names the library calls whose whole effect it reads (``calls``): a set-up call
that is not among them is named in a warning when its cell is restored, whatever library it
goes into. A setting that cannot be read without changing it (matplotlib's date epoch is fixed
by the first reading) is read only after a cell that called one of its calls.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["SETTINGS", "Setting", "SettingsWatch", "apply_changes", "setting_for_call"]

_MISSING = object()


@dataclass(frozen=True, slots=True)
class Setting:
    """One kind of process-wide state: how to read it, what changed, and how to set it again."""

    name: str
    read: Callable[[], Any]
    diff: Callable[[Any, Any], Any]
    apply: Callable[[Any], None]
    # Public names of the calls whose whole effect this setting reads (``numpy.random.seed``).
    calls: tuple[str, ...] = ()
    # Read only after a cell that called one of ``calls``: reading it at any other time would change it.
    on_call: bool = False


def _whole(before: Any, after: Any) -> Any:
    return None if _same(before, after) else after


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare (arrays inside) are compared by repr
        return repr(a) == repr(b)


def _keys(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    changed = {k: v for k, v in after.items() if k not in before or not _same(before[k], v)}
    removed = {k: _MISSING for k in before if k not in after}
    return {**changed, **removed} or None


def _replaced(before: dict[Any, Any], after: dict[Any, Any]) -> dict[Any, Any] | None:
    # Entries that are replaced, not edited (a style, a unit converter): compared as objects.
    changed = {key: value for key, value in after.items() if before.get(key) is not value}
    changed.update({key: _MISSING for key in before if key not in after})
    return changed or None


def _put(mapping: Any, changed: dict[Any, Any]) -> None:
    for key, value in changed.items():
        if value is _MISSING:
            mapping.pop(key, None)
        else:
            mapping[key] = value


def _module(name: str) -> Any:
    return sys.modules.get(name)


# -- scikit-learn ---------------------------------------------------------------------------------


def _read_sklearn() -> Any:
    module = _module("sklearn")
    return None if module is None else dict(module.get_config())


def _apply_sklearn(changed: dict[str, Any]) -> None:
    import sklearn

    sklearn.set_config(**{k: v for k, v in changed.items() if v is not _MISSING})


# -- numpy ----------------------------------------------------------------------------------------


def _read_numpy_random() -> Any:
    numpy = _module("numpy")
    if numpy is None:
        return None
    kind, keys, position, has_gauss, gauss = numpy.random.get_state(legacy=True)
    return (kind, keys.tobytes(), position, has_gauss, gauss)


def _apply_numpy_random(state: Any) -> None:
    import numpy

    kind, keys, position, has_gauss, gauss = state
    numpy.random.set_state((kind, numpy.frombuffer(keys, dtype=numpy.uint32), position, has_gauss, gauss))


def _read_numpy_options() -> Any:
    numpy = _module("numpy")
    if numpy is None:
        return None
    return {"err": numpy.geterr(), "print": numpy.get_printoptions()}


def _apply_numpy_options(changed: dict[str, Any]) -> None:
    import numpy

    if "err" in changed:
        numpy.seterr(**changed["err"])
    if "print" in changed:
        options = dict(changed["print"])
        # get_printoptions reports 'legacy' as False or a string; set_printoptions wants the same.
        numpy.set_printoptions(**options)


# -- random ---------------------------------------------------------------------------------------


def _read_random() -> Any:
    return random.getstate()


# -- pandas ---------------------------------------------------------------------------------------


def _option_names(options: Any, caught: list[Any], prefix: str = "") -> list[str]:
    names = []
    for key in dir(options):
        before = len(caught)
        try:
            value = getattr(options, key)
        except Exception:  # noqa: BLE001 - an option withdrawn with an error
            continue
        if type(value) is type(options):
            names.extend(_option_names(value, caught, f"{prefix}{key}."))
        elif len(caught) == before:
            # A deprecated option warns when read, and setting it has no effect: left out.
            names.append(prefix + key)
    return names


_pandas_names: list[str] = []


def _live_options(pandas: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        return _option_names(pandas.options, caught)


def _read_pandas() -> Any:
    pandas = _module("pandas")
    if pandas is None:
        return None
    if not _pandas_names:
        _pandas_names.extend(_live_options(pandas))
    return {name: pandas.get_option(name) for name in _pandas_names}


def _apply_pandas(changed: dict[str, Any]) -> None:
    import pandas

    for name, value in changed.items():
        if value is not _MISSING:
            pandas.set_option(name, value)


# -- matplotlib -----------------------------------------------------------------------------------


def _read_rc() -> Any:
    matplotlib = _module("matplotlib")
    if matplotlib is None:
        return None
    # The backend is the kernel's business: a restore must not switch it.
    return {k: v for k, v in dict.items(matplotlib.rcParams) if k != "backend"}


def _apply_rc(changed: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.rcParams.update({k: v for k, v in changed.items() if v is not _MISSING})


def _read_styles() -> Any:
    style = _module("matplotlib.style")
    return None if style is None else dict(style.library)


def _diff_styles(before: dict[str, Any], after: dict[str, Any]) -> Any:
    changed = _replaced(before, after)
    # Copy only what changed.
    return None if changed is None else {name: p if p is _MISSING else dict(p) for name, p in changed.items()}


def _apply_styles(changed: dict[str, Any]) -> None:
    from matplotlib import style

    _put(style.library, changed)


def _read_colormaps() -> Any:
    matplotlib = _module("matplotlib")
    if matplotlib is None:
        return None
    registry = matplotlib.colormaps
    if not _library_colormaps:
        # The colormaps there when matplotlib is first read are the library's: an import registers
        # them again, so only their names are compared (a copy of each would cost every cell).
        _library_colormaps.update(registry)
    return {name: None if name in _library_colormaps else registry[name] for name in registry}


_library_colormaps: set[str] = set()


def _apply_colormaps(changed: dict[str, Any]) -> None:
    import matplotlib

    registry = matplotlib.colormaps
    for name, colormap in changed.items():
        if colormap is None or (name in registry and _same(registry[name], colormap)):
            continue  # the library's own, or there already
        registry.unregister(name)  # so that registering it is not reported as overwriting
        if colormap is not _MISSING:
            registry.register(colormap, name=name)


def _read_units() -> Any:
    units = _module("matplotlib.units")
    return None if units is None else dict(units.registry)


def _apply_units(changed: dict[Any, Any]) -> None:
    from matplotlib import units

    _put(units.registry, changed)


def _read_epoch() -> Any:
    # Only read after a cell called set_epoch: a first get_epoch fixes the epoch for good.
    dates = _module("matplotlib.dates")
    return None if dates is None else dates.get_epoch()


def _apply_epoch(epoch: str) -> None:
    from matplotlib import dates

    try:
        dates.set_epoch(epoch)
    except RuntimeError:
        # Fixed already (the epoch cannot change once dates were converted): fine if it is this one.
        if dates.get_epoch() != epoch:
            raise RuntimeError(
                f"the date epoch is already {dates.get_epoch()!r} and matplotlib lets it be set only "
                f"once per process, so it cannot be set to {epoch!r}"
            ) from None


# -- warnings, logging, environment, paths --------------------------------------------------------


def _read_warnings() -> Any:
    return list(warnings.filters)


def _apply_warnings(filters: list[Any]) -> None:
    warnings.resetwarnings()
    for action, message, category, module, lineno in filters:
        if message is None and module is None:
            warnings.simplefilter(action, category, lineno, append=True)
        else:
            warnings.filterwarnings(action, _pattern(message), category, _pattern(module), lineno, append=True)


def _pattern(text: Any) -> str:
    # Filters hold compiled patterns, or plain strings when set from the command line.
    return "" if text is None else str(getattr(text, "pattern", text))


def _read_loggers() -> Any:
    levels = {"": logging.getLogger().level}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            levels[name] = logger.level
    return levels


def _apply_loggers(changed: dict[str, Any]) -> None:
    for name, level in changed.items():
        if level is not _MISSING:
            logging.getLogger(name or None).setLevel(level)


def _read_environ() -> Any:
    return dict(os.environ)


def _apply_environ(changed: dict[str, Any]) -> None:
    _put(os.environ, changed)


def _apply_cwd(path: str) -> None:
    os.chdir(path)


def _read_path() -> Any:
    return list(sys.path)


def _diff_path(before: list[str], after: list[str]) -> Any:
    if before == after:
        return None
    added = [(index, entry) for index, entry in enumerate(after) if entry not in before]
    removed = [entry for entry in before if entry not in after]
    return {"added": added, "removed": removed}


def _apply_path(change: dict[str, Any]) -> None:
    for entry in change["removed"]:
        while entry in sys.path:
            sys.path.remove(entry)
    for index, entry in change["added"]:
        if entry not in sys.path:
            sys.path.insert(min(index, len(sys.path)), entry)


# -- torch ----------------------------------------------------------------------------------------


def _read_torch() -> Any:
    torch = _module("torch")
    if torch is None:
        return None
    return {"rng": torch.random.get_rng_state().numpy().tobytes(), "dtype": str(torch.get_default_dtype())}


def _apply_torch(changed: dict[str, Any]) -> None:
    import torch

    if "rng" in changed:
        torch.random.set_rng_state(torch.frombuffer(bytearray(changed["rng"]), dtype=torch.uint8))
    if "dtype" in changed:
        torch.set_default_dtype(getattr(torch, changed["dtype"].removeprefix("torch.")))


_RC_CALLS = (
    "matplotlib.style.use",
    "matplotlib.interactive",
    "matplotlib.pyplot.ion",
    "matplotlib.pyplot.ioff",
    # seaborn's set_theme and set_palette may also change matplotlib's named colours: not listed.
    "seaborn.set_style",
    "seaborn.set_context",
)
_TORCH_CALLS = (
    "torch.manual_seed",
    "torch.seed",
    "torch.set_rng_state",
    "torch.random.manual_seed",
    "torch.random.seed",
    "torch.set_default_dtype",
)

SETTINGS: tuple[Setting, ...] = (
    Setting("os.environ", _read_environ, _keys, _apply_environ, ("dotenv.load_dotenv",)),
    Setting("cwd", os.getcwd, _whole, _apply_cwd),
    Setting("sys.path", _read_path, _diff_path, _apply_path),
    Setting("warnings", _read_warnings, _whole, _apply_warnings),
    Setting("logging", _read_loggers, _keys, _apply_loggers, ("logging.Logger.setLevel",)),
    Setting("random", _read_random, _whole, random.setstate, ("random.seed", "random.setstate")),
    Setting(
        "numpy.random", _read_numpy_random, _whole, _apply_numpy_random, ("numpy.random.seed", "numpy.random.set_state")
    ),
    Setting("numpy", _read_numpy_options, _keys, _apply_numpy_options, ("numpy.seterr", "numpy.set_printoptions")),
    Setting("pandas", _read_pandas, _keys, _apply_pandas, ("pandas.set_option", "pandas.reset_option")),
    Setting("sklearn", _read_sklearn, _keys, _apply_sklearn, ("sklearn.set_config",)),
    Setting("matplotlib.rcParams", _read_rc, _keys, _apply_rc, _RC_CALLS),
    Setting("matplotlib.style", _read_styles, _diff_styles, _apply_styles),
    Setting(
        "matplotlib.colormaps",
        _read_colormaps,
        _keys,
        _apply_colormaps,
        ("matplotlib.colormaps.register", "matplotlib.colormaps.unregister"),
    ),
    Setting(
        "matplotlib.units",
        _read_units,
        _replaced,
        _apply_units,
        ("pandas.plotting.register_matplotlib_converters", "pandas.plotting.deregister_matplotlib_converters"),
    ),
    Setting("matplotlib.dates.epoch", _read_epoch, _whole, _apply_epoch, ("matplotlib.dates.set_epoch",), on_call=True),
    Setting("torch", _read_torch, _keys, _apply_torch, _TORCH_CALLS),
)


def _public(path: str) -> Any:
    """The object a public dotted name stands for, if its library is imported (else None)."""
    root, *rest = path.split(".")
    found = sys.modules.get(root)
    for name in rest:
        found = getattr(found, name, None)
    return found


def setting_for_call(target: Any) -> Setting | None:
    """Return the setting that reads the whole effect of calling ``target``, if there is one."""
    # A method is named by its class (``logging.Logger.setLevel``), whichever object it is called on.
    candidates = [target, getattr(target, "__func__", None)]
    for setting in SETTINGS:
        for path in setting.calls:
            known = _public(path)
            if known is not None and any(_is(known, candidate) for candidate in candidates):
                return setting
    return None


def _is(known: Any, candidate: Any) -> bool:
    try:
        # Bound methods are made anew at each lookup: they compare equal, never identical.
        return known is candidate or bool(known == candidate)
    except Exception:  # noqa: BLE001 - an object that refuses to compare is not this call
        return False


def _read(setting: Setting) -> Any:
    try:
        return setting.read()
    except Exception:  # noqa: BLE001 - a library too old or too new to read: nothing recorded for it
        return None


class SettingsWatch:
    """Readings taken around one cell, to tell which settings it changed.

    A library the cell imports is read right after the statement that imported it: what it
    sets while importing, a restore's import sets again; only what the cell changed after
    counts.
    """

    def __init__(self) -> None:
        self._before: dict[str, Any] = {}
        self._modules = -1
        self.after_statement()

    def after_statement(self) -> None:
        """Read the settings of libraries imported since the last reading (cheap when none was)."""
        if len(sys.modules) == self._modules:
            return
        self._modules = len(sys.modules)
        for setting in SETTINGS:
            if setting.name not in self._before and not setting.on_call:
                reading = _read(setting)
                if reading is not None:
                    self._before[setting.name] = reading

    def changes(self, called: Iterable[str] = ()) -> dict[str, Any]:
        """Return what the cell changed, per setting; ``called`` names the settings read only after
        a call the cell made (recorded whole)."""
        found = {}
        for setting in SETTINGS:
            if setting.on_call:
                reading = _read(setting) if setting.name in called else None
                if reading is not None:
                    found[setting.name] = reading
                continue
            before = self._before.get(setting.name)
            if before is None:
                continue
            after = _read(setting)
            delta = None if after is None else setting.diff(before, after)
            if delta is not None:
                found[setting.name] = delta
        return found


def apply_changes(found: dict[str, Any]) -> list[str]:
    """Apply recorded changes in order; return messages for those that could not be applied."""
    problems = []
    for setting in SETTINGS:
        if setting.name in found:
            try:
                setting.apply(found[setting.name])
            except Exception as error:  # noqa: BLE001 - one setting that fails must not stop the restore
                problems.append(f"{setting.name}: {type(error).__name__}: {error}")
    return problems
