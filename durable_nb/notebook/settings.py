"""Process-wide settings a cell can change outside its variables, recorded and re-applied on restore.

A cell such as ``sklearn.set_config(...)``, ``np.random.seed(0)`` or ``pd.set_option(...)``
defines no variable, yet every later cell depends on what it did. Each setting is read
before and after a durable cell; what the cell changed is committed with it and applied again
when the cell is restored, in notebook order. The readings only look at libraries the kernel
has already imported.

Settings covered: scikit-learn's config; numpy's legacy global random state, error handling and
print options; Python's ``random``; pandas options; matplotlib's rcParams, registered styles and
colormaps, unit converters and date epoch; warning filters; logger levels; environment variables;
the working directory; ``sys.path``; PyTorch's random state and default dtype. How each is read
and set again is in ``process_settings`` (Python's own state) and ``library_settings``; this
module watches them around a cell and applies what a cell changed.

Each setting also names the library calls whose whole effect it reads (``calls``): a set-up call
that is not among them is named in a warning when its cell is restored, whatever library it
goes into. A setting that cannot be read without changing it (matplotlib's date epoch is fixed
by the first reading) is read only after a cell that called one of its calls.
"""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from .._tuples import Typed
from .library_settings import LIBRARY_SETTINGS, forget_numpy_random
from .process_settings import PROCESS_SETTINGS
from .setting_changes import Setting

__all__ = ["SETTINGS", "Setting", "SettingsReading", "SettingsWatch", "apply_changes", "setting_for_call"]

# In the order they are applied on restore.
SETTINGS: tuple[Setting, ...] = (*PROCESS_SETTINGS, *LIBRARY_SETTINGS)


def _public(path: str) -> Any:
    """The object a public dotted name stands for, if its library is imported (else None)."""
    root, *rest = path.split(".")
    found = sys.modules.get(root)
    for name in rest:
        if isinstance(found, ModuleType):
            # A submodule a library loads on first use (numpy.random) is only looked up if loaded:
            # asking the module for it would import it, and the cell cannot have called into it.
            found = vars(found).get(name) or sys.modules.get(f"{found.__name__}.{name}")
        else:
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


# How many times recorded changes were applied in this process (a restore, going back): readings
# taken before the last one no longer say what the settings are.
_applied = 0


class SettingsReading(Typed):
    """Every setting as a cell left it: the readings, how many modules were loaded, and ``_applied``."""

    values: dict[str, Any]
    modules: int
    applied: int


class SettingsWatch:
    """Readings taken around one cell, to tell which settings it changed.

    A library the cell imports is read right after the statement that imported it: what it
    sets while importing, a restore's import sets again; only what the cell changed after
    counts. ``start``, the previous durable cell's ending, stands for the reading before the
    cell when that cell ran just before this one and nothing was applied since: reading every
    setting costs a no-change cell more than the rest of its work (numpy's random state alone is
    a copy of 2.5 KB). A change made between the two cells (a widget's callback) then counts
    as this cell's, which is what a restore needs: it brings the settings back to where this
    cell left them, from where the previous cell's restore left them.
    """

    def __init__(self, start: SettingsReading | None = None) -> None:
        if start is not None and start.applied == _applied:
            self._before: dict[str, Any] = dict(start.values)
            self._modules = start.modules
        else:
            self._before = {}
            self._modules = -1
        self.ending: SettingsReading | None = None
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
        """Return what the cell changed, per setting; ``called`` names the settings the cell's
        set-up calls went into (those read only after such a call are recorded whole)."""
        found = {}
        readings = {}
        if "numpy.random" in called:
            forget_numpy_random()
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
            if after is None:
                continue
            readings[setting.name] = after
            delta = setting.diff(before, after)
            if delta is not None:
                found[setting.name] = delta
        self.ending = SettingsReading(readings, self._modules, _applied)
        return found


def apply_changes(found: dict[str, Any]) -> list[str]:
    """Apply recorded changes in order; return messages for those that could not be applied."""
    global _applied
    _applied += 1
    problems = []
    for setting in SETTINGS:
        if setting.name in found:
            try:
                setting.apply(found[setting.name])
            except Exception as error:  # noqa: BLE001 - one setting that fails must not stop the restore
                problems.append(f"{setting.name}: {type(error).__name__}: {error}")
    return problems
