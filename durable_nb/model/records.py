"""The records a store reads back: runs, checkpoints and the values they point to.

The records only some calls need (gates and their decisions, status rows, events) live in
``gates`` and ``reports``: a kernel attaching to a run does not define them. Their old names
here still resolve (values pickled before name these classes by this module).

The records' annotations are evaluated, not kept as text: dataclasses parses a text annotation
twice per field (is it a ClassVar, an InitVar?), a tenth of what defining them cost a kernel.
"""

import reprlib
from dataclasses import MISSING, FrozenInstanceError, dataclass, field, fields
from operator import attrgetter
from types import MemberDescriptorType
from typing import Any, TypeVar

from .._lazy import lazy_names
from ._inits import FACTORIES
from .status import CheckpointStatus, EventType, RunKind, RunStatus

__all__ = [
    "Blob",
    "CheckpointDraft",
    "CheckpointRecord",
    "CheckpointState",
    "NewEvent",
    "RunRecord",
    "Record",
    "evolve",
    "quick_init",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "Decision": "durable_nb.model.gates",
        "PendingInterrupt": "durable_nb.model.gates",
        "EventRecord": "durable_nb.model.reports",
        "StatusRows": "durable_nb.model.reports",
    },
)

T = TypeVar("T", bound=type)
R = TypeVar("R")


class Record:
    """What dataclasses writes for a frozen record class (comparison, hash, repr, no assignment),
    written once for every record class: dataclasses compiles each of them anew for each class,
    over half of what defining the records costs a kernel attaching to a run."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _compared(type(self))
        return bool(compared(self) == compared(other))

    def __hash__(self) -> int:
        return hash(_compared(type(self))(self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)  # type: ignore[arg-type]
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    # Pickled and copied as dataclasses does a frozen slotted class: the values of the fields in order.
    def __getstate__(self) -> list[Any]:
        return [getattr(self, f.name) for f in fields(self)]  # type: ignore[arg-type]

    def __setstate__(self, state: list[Any]) -> None:
        for f, value in zip(fields(self), state, strict=False):  # type: ignore[arg-type]
            object.__setattr__(self, f.name, value)


# Per record class: a getter of the values it is compared and hashed by, as one tuple.
_comparisons: dict[type, "attrgetter[Any]"] = {}


def _compared(cls: type) -> "attrgetter[Any]":
    getter = _comparisons.get(cls)
    if getter is None:
        # A last name that is no field's: the getter gives a tuple however many fields are compared.
        names = [f.name for f in fields(cls) if f.compare]
        getter = _comparisons[cls] = attrgetter(*names, "__class__")
    return getter


class _Factory:
    """The default of a field whose value a factory makes (what dataclasses shows)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY: Any = _Factory()


def quick_init(cls: T) -> T:
    """Give a frozen, slotted dataclass an ``__init__`` that sets each slot through its descriptor.

    Meant for ``@dataclass(init=False, ...)``, so that dataclasses writes no ``__init__`` of its own
    only to see it replaced (about a fifth of a record class's cost at import).

    The same parameters, defaults and factories as the one dataclasses writes, which sets each
    field through ``object.__setattr__`` (the way past the frozen ``__setattr__``): about twice
    the instructions, paid several times per workflow node for records of up to thirty fields.

    The function is written as text, and compiled with the package (``_inits``, written by
    ``write_inits``): parsing the records' ``__init__`` at import was an eighth of attaching a
    kernel. Text that ``_inits`` does not hold (a record changed since) is compiled here.
    """
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init does not run __post_init__ ({cls.__name__} has one).")
    scope: dict[str, Any] = {"_FACTORY": _FACTORY}
    positional: list[str] = []
    keywords: list[str] = []
    lines: list[str] = []
    for index, f in enumerate(fields(cls)):
        slot = getattr(cls, f.name)
        if not f.init or not isinstance(slot, MemberDescriptorType):
            raise TypeError(f"quick_init sets slots given to __init__, and {cls.__name__}.{f.name} is not one.")
        name, value = f.name, f.name
        scope[f"_set{index}"] = slot.__set__
        if f.default is not MISSING:
            scope[f"_default{index}"] = f.default
            name = f"{f.name}=_default{index}"
        elif f.default_factory is not MISSING:
            scope[f"_factory{index}"] = f.default_factory
            name = f"{f.name}=_FACTORY"
            value = f"_factory{index}() if {f.name} is _FACTORY else {f.name}"
        (keywords if f.kw_only else positional).append(name)
        lines.append(f"    _set{index}(self, {value})\n")
    signature = ", ".join(["self", *positional, *(["*", *keywords] if keywords else [])])
    source = f"def __init__({signature}) -> None:\n{''.join(lines) or '    pass'}\n"
    _written[f"{cls.__module__}.{cls.__qualname__}"] = (source, tuple(sorted(scope)))
    made = FACTORIES.get(source)
    if made is not None:
        init = made(**scope)  # the same text, compiled with the package: its names are the scope's
    else:
        exec(source, scope)  # made from field names
        init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[misc]
    return cls


# Each quick_init record's __init__ text and the names it uses, by the record's dotted name.
_written: dict[str, tuple[str, tuple[str, ...]]] = {}

# The modules whose records quick_init makes (all of them are imported to write _inits).
QUICK_INIT_MODULES = ("durable_nb.model.records", "durable_nb.model.commits", "durable_nb.store.blob_files")


def inits_source() -> str:
    """The text of ``_inits``: each quick_init record's ``__init__`` text, as a function compiled
    with the package that makes it from the names the text uses."""
    from importlib import import_module

    for module in QUICK_INIT_MODULES:
        import_module(module)
    parts = [_INITS_HEAD]
    table = []
    for index, (record, (source, names)) in enumerate(sorted(_written.items())):
        body = "".join(f"    {line}" if line.strip() else line for line in source.splitlines(keepends=True))
        parts.append(f"\n\n# {record}\ndef _{index}({', '.join(names)}):\n{body}    return __init__\n")
        table.append(f"    {source!r}: _{index},\n")
    parts.append("\n\nFACTORIES = {\n" + "".join(table) + "}\n")
    return "".join(parts)


def write_inits() -> None:
    """Write ``_inits`` again (after a quick_init record changed: a test says when)."""
    from pathlib import Path

    Path(__file__).with_name("_inits.py").write_text(inits_source())


_INITS_HEAD = '''# fmt: off
# ruff: noqa: E501
"""The ``__init__`` of each record quick_init makes, compiled with the package rather than at import.

Written by ``durable_nb.model.records.write_inits()``; not edited by hand (a test holds it equal to
what the records make). Each function takes the names its text uses and returns the ``__init__``.
"""

from collections.abc import Callable
from typing import Any

__all__ = ["FACTORIES"]

FACTORIES: dict[str, Callable[..., Any]]
'''


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class Blob(Record):
    """A serialized value stored once under its content address."""

    hash: str
    codec: str
    data: bytes
    # (key, hex digest of the address form of ``data``) when the store hashed the bytes as it
    # read them: loading then needs no second pass over a large value.
    read_digest: tuple[bytes, str] | None = field(default=None, compare=False, repr=False)
    # Addresses of other blobs this one is made of (a namespace group's array buffers): what
    # keeps this blob alive keeps them alive too.
    parts: tuple[str, ...] = ()
    # A value stored under an unsigned address (before values were signed) loads only with the
    # seal the schema upgrade gave it under the key; values stored since have none.
    seal: str | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return len(self.data)


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class RunRecord(Record):
    """One row of the runs table."""

    run_id: str
    name: str
    kind: RunKind
    status: RunStatus
    created_at: float
    updated_at: float
    input_manifest: dict[str, str]
    error: str | None = None
    error_type: str | None = None
    idempotency_key: str | None = None
    parent_run_id: str | None = None
    parent_checkpoint_id: str | None = None
    owner: str | None = None
    lease_until: float | None = None
    head_seq: int = 0
    event_seq: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class CheckpointState(Record):
    """The state of a run at a checkpoint: its values (name to address) and completed nodes.

    ``since_snapshot`` counts the checkpoints since the last one that stored the whole state.
    """

    manifest: dict[str, str]
    completed: list[str]
    since_snapshot: int = 0


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class CheckpointDraft(Record):
    """A checkpoint about to be written; the store assigns its seq and time.

    A checkpoint stores what it changed: ``changes`` (name to address, None for a name
    removed) and the nodes it added to or removed from ``completed``. Now and then it also
    carries the whole state (``snapshot``), so that the state at any checkpoint is rebuilt from
    a bounded number of changes (``Store.state_at``).
    """

    checkpoint_id: str
    step: str
    node_id: str | None
    status: CheckpointStatus
    queue: list[str] = field(default_factory=list)
    changes: dict[str, str | None] = field(default_factory=dict)
    completed_added: list[str] = field(default_factory=list)
    completed_removed: list[str] = field(default_factory=list)
    snapshot: CheckpointState | None = None
    skipped: list[str] = field(default_factory=list)
    routes: dict[str, Any] = field(default_factory=dict)
    iteration: int | None = None
    item_index: int | None = None
    branch_key: str | None = None
    parent_checkpoint_id: str | None = None
    node_input: Any = None
    node_output: dict[str, str] | None = None
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    interrupt: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    resumes: dict[str, list[Any]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    agent_path: str | None = None
    duration: float | None = None
    attempts: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False, kw_only=True)
class CheckpointRecord(CheckpointDraft):
    """One immutable row of the checkpoints table: a written draft with its run, seq and time."""

    run_id: str
    seq: int
    created_at: float


@quick_init
@dataclass(repr=False, eq=False, slots=True, init=False)
class NewEvent(Record):
    """An event about to be appended to a run's log."""

    type: EventType
    node_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


# Per record class: its field names in order, as a set, and a getter of all their values at once.
_layouts: dict[type, tuple[tuple[str, ...], frozenset[str], "attrgetter[Any]"]] = {}


def _layout(cls: type) -> tuple[tuple[str, ...], frozenset[str], "attrgetter[Any]"]:
    layout = _layouts.get(cls)
    if layout is None:
        if any(f.kw_only or not f.init for f in fields(cls)):
            raise TypeError(f"evolve() copies records built from positional fields alone, not {cls.__name__}.")
        names = tuple(f.name for f in fields(cls))
        layout = _layouts[cls] = (names, frozenset(names), attrgetter(*names))
    return layout


def evolve(record: R, **changes: Any) -> R:
    """Return a copy of a record with ``changes``: ``dataclasses.replace`` without its loop in Python
    over the fields (the run row is copied so on every node's commit)."""
    names, known, values = _layout(type(record))
    if not known.issuperset(changes):
        raise TypeError(f"{type(record).__name__} has no field {sorted(set(changes) - known)[0]!r}.")
    return type(record)(*map(changes.get, names, values(record)))
