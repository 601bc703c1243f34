"""Library settings a cell can change: scikit-learn's config; numpy's legacy global random
state, error handling and print options; pandas options; matplotlib's rcParams, registered
styles and colormaps, unit converters and date epoch; PyTorch's random state and default dtype.

Each is read only once its library is imported (by the notebook, never by this module)."""

from __future__ import annotations

import functools
import itertools
import operator
import sys
import warnings
from typing import Any

from .setting_changes import MISSING, Setting, changed_keys, put_changes, replaced_entries, same, whole_reading

__all__ = ["LIBRARY_SETTINGS"]


def _module(name: str) -> Any:
    return sys.modules.get(name)


# -- scikit-learn ---------------------------------------------------------------------------------


def _read_sklearn() -> Any:
    module = _module("sklearn")
    return None if module is None else dict(module.get_config())


def _apply_sklearn(changed: dict[str, Any]) -> None:
    import sklearn

    sklearn.set_config(**{k: v for k, v in changed.items() if v is not MISSING})


# -- numpy ----------------------------------------------------------------------------------------


# numpy loads numpy.random on first use. Until then its state is the fresh one it will start with,
# so a cell that loads it (np.random.seed, or a first draw) has changed it from this reading.
NUMPY_RANDOM_NOT_LOADED = "numpy.random not loaded yet"


def _read_numpy_random() -> Any:
    # Reading the state before the notebook uses numpy.random would load it: say it is not loaded.
    random = _module("numpy.random")
    if random is None:
        return None if _module("numpy") is None else NUMPY_RANDOM_NOT_LOADED
    raw = _raw_numpy_random(random)
    last = _last_numpy_random
    # get_state copies the 624 words one by one (half a million instructions, every cell): the
    # reading of the same words is the last one. Not when a normal deviate was cached with it: the
    # next draw takes that one, changing the state without moving the words.
    if raw is not None and last is not None and last[0] == raw and not last[1][3]:
        return last[1]
    kind, keys, position, has_gauss, gauss = random.get_state(legacy=True)
    reading = (kind, keys.tobytes(), position, has_gauss, gauss)
    if raw is not None and raw == reading[1] + position.to_bytes(4, sys.byteorder, signed=True):
        _remember_numpy_random(raw, reading)
    return reading


# The last reading of numpy's legacy random state, with the generator's words it was taken from.
_last_numpy_random: tuple[bytes, Any] | None = None
# Bytes of the MT19937 state numpy's C API lays out: 624 32-bit words, then the position (an int).
_MT19937_STATE = 624 * 4 + 4


def _remember_numpy_random(raw: bytes, reading: Any) -> None:
    global _last_numpy_random
    _last_numpy_random = (raw, reading)


def forget_numpy_random() -> None:
    """Read numpy's random state in full next time (a cell called ``set_state``: it may have set
    the same words with a normal deviate cached)."""
    global _last_numpy_random
    _last_numpy_random = None


def _raw_numpy_random(random: Any) -> bytes | None:
    """The words of the legacy generator's state as in memory (a copy of 2.5 KB, in C), or None
    where numpy does not offer them (before 1.25, or another bit generator than MT19937)."""
    try:
        generator = random.get_bit_generator()
        if type(generator).__name__ != "MT19937":
            return None
        import ctypes

        return ctypes.string_at(generator.ctypes.state_address, _MT19937_STATE)
    except Exception:  # noqa: BLE001 - read in full, as without this copy
        return None


def _apply_numpy_random(state: Any) -> None:
    import numpy

    kind, keys, position, has_gauss, gauss = state
    forget_numpy_random()
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
# Each name's parts, for reading the option where pandas stores it: made with the names.
_pandas_paths: list[list[str]] = []


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
        _pandas_paths.extend(name.split(".") for name in _pandas_names)
    stored = _stored_options()
    if stored is not None:
        return stored
    return {name: pandas.get_option(name) for name in _pandas_names}


def _stored_options() -> dict[str, Any] | None:
    """The options as pandas holds them (what get_option returns for a full name, without its
    pattern matching: a hundred lookups at each cell); None where pandas holds them otherwise."""
    config = getattr(sys.modules.get("pandas._config.config"), "_global_config", None)
    if not isinstance(config, dict):
        return None
    try:
        # Each walked down in C, with no Python line per option: read before and after every cell. The
        # nested dicts are plain dicts whose leaves are the options: a name that no longer leads to one
        # fails to index.
        values = map(functools.reduce, itertools.repeat(operator.getitem), _pandas_paths, itertools.repeat(config))
        return dict(zip(_pandas_names, values, strict=True))
    except (KeyError, TypeError, IndexError):
        return None


def _apply_pandas(changed: dict[str, Any]) -> None:
    import pandas

    for name, value in changed.items():
        if value is not MISSING:
            pandas.set_option(name, value)


# -- matplotlib -----------------------------------------------------------------------------------


def _read_rc() -> Any:
    matplotlib = _module("matplotlib")
    if matplotlib is None:
        return None
    # dict.keys and dict.values: the stored values (RcParams' own lookup would resolve the backend),
    # as two tuples made in C. A dict of them costs ten times as much, at every cell: it is made
    # only for a cell that changed them.
    params = matplotlib.rcParams
    return tuple(dict.keys(params)), tuple(dict.values(params))


def _diff_rc(before: tuple[tuple[str, ...], tuple[Any, ...]], after: tuple[tuple[str, ...], tuple[Any, ...]]) -> Any:
    try:
        # Most cells: the same keys holding the very same values, told in C (each is itself at once).
        if before == after:
            return None
    except Exception:  # noqa: BLE001 - a value that does not compare: key by key below
        pass
    return changed_keys(_rc_params(before), _rc_params(after))


def _rc_params(reading: tuple[tuple[str, ...], tuple[Any, ...]]) -> dict[str, Any]:
    found = dict(zip(*reading, strict=True))
    found.pop("backend", None)  # the kernel's business: a restore must not switch it
    return found


def _apply_rc(changed: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.rcParams.update({k: v for k, v in changed.items() if v is not MISSING})


def _read_styles() -> Any:
    style = _module("matplotlib.style")
    return None if style is None else dict(style.library)


def _diff_styles(before: dict[str, Any], after: dict[str, Any]) -> Any:
    changed = replaced_entries(before, after)
    # Copy only what changed.
    return None if changed is None else {name: p if p is MISSING else dict(p) for name, p in changed.items()}


def _apply_styles(changed: dict[str, Any]) -> None:
    from matplotlib import style

    put_changes(style.library, changed)


def _read_colormaps() -> Any:
    matplotlib = _module("matplotlib")
    if matplotlib is None:
        return None
    registry = matplotlib.colormaps
    names = tuple(registry)
    if not _library_colormaps:
        # The colormaps there when matplotlib is first read are the library's: an import registers
        # them again, so only their names are compared (a copy of each would cost every cell).
        _library_colormaps.update(names)
        _library_names.append(names)
    if names == _library_names[0]:
        return names, {}  # most cells: the library's own names, in order, compared in C
    return names, {name: registry[name] for name in set(names) - _library_colormaps}


def _diff_colormaps(
    before: tuple[tuple[str, ...], dict[str, Any]], after: tuple[tuple[str, ...], dict[str, Any]]
) -> Any:
    # Each name's colormap, the library's own standing as None.
    if before[0] == after[0] and not before[1] and not after[1]:
        return None
    return changed_keys({**dict.fromkeys(before[0]), **before[1]}, {**dict.fromkeys(after[0]), **after[1]})


_library_colormaps: set[str] = set()
_library_names: list[tuple[str, ...]] = []  # the library's names, in the order first read


def _apply_colormaps(changed: dict[str, Any]) -> None:
    import matplotlib

    registry = matplotlib.colormaps
    for name, colormap in changed.items():
        if colormap is None or (name in registry and same(registry[name], colormap)):
            continue  # the library's own, or there already
        registry.unregister(name)  # so that registering it is not reported as overwriting
        if colormap is not MISSING:
            registry.register(colormap, name=name)


def _read_units() -> Any:
    units = _module("matplotlib.units")
    return None if units is None else dict(units.registry)


def _apply_units(changed: dict[Any, Any]) -> None:
    from matplotlib import units

    put_changes(units.registry, changed)


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

LIBRARY_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "numpy.random",
        _read_numpy_random,
        whole_reading,
        _apply_numpy_random,
        ("numpy.random.seed", "numpy.random.set_state"),
    ),
    Setting(
        "numpy", _read_numpy_options, changed_keys, _apply_numpy_options, ("numpy.seterr", "numpy.set_printoptions")
    ),
    Setting("pandas", _read_pandas, changed_keys, _apply_pandas, ("pandas.set_option", "pandas.reset_option")),
    Setting("sklearn", _read_sklearn, changed_keys, _apply_sklearn, ("sklearn.set_config",)),
    Setting("matplotlib.rcParams", _read_rc, _diff_rc, _apply_rc, _RC_CALLS),
    Setting("matplotlib.style", _read_styles, _diff_styles, _apply_styles),
    Setting(
        "matplotlib.colormaps",
        _read_colormaps,
        _diff_colormaps,
        _apply_colormaps,
        ("matplotlib.colormaps.register", "matplotlib.colormaps.unregister"),
    ),
    Setting(
        "matplotlib.units",
        _read_units,
        replaced_entries,
        _apply_units,
        ("pandas.plotting.register_matplotlib_converters", "pandas.plotting.deregister_matplotlib_converters"),
    ),
    Setting(
        "matplotlib.dates.epoch",
        _read_epoch,
        whole_reading,
        _apply_epoch,
        ("matplotlib.dates.set_epoch",),
        on_call=True,
    ),
    Setting("torch", _read_torch, changed_keys, _apply_torch, _TORCH_CALLS),
)
