"""One small registry for every pluggable kind: backbones, objectives, adapters, tasks and evaluators.

Each kind is a `Registry`; components register by name and are looked up by name, with close
matches suggested on a typo. Nothing here knows what a backbone or an objective is."""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import fnmatch
import importlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .errors import UnknownNameError

_source = "built-in"  # where registrations come from now: set by `registering_from` while a plugin loads
# Plugin discovery, called with a kind before its first lookup: installed by `vitx.discovery` when the package is
# imported (the registry knows nothing of entry points, and nothing below it imports the plugin loader).
discover: Callable[[str], None] = lambda kind: None


@contextlib.contextmanager
def registering_from(origin: str) -> Iterator[None]:
    """Components registered inside the block are recorded as coming from `origin` (a plugin's file, module or
    entry point); outside it they are built-in."""
    global _source
    before, _source = _source, origin
    try:
        yield
    finally:
        _source = before


@dataclass(frozen=True)
class Entry:
    """A registered component: the object (usually a factory), a one-line description and its origin."""

    name: str
    obj: Any
    description: str = ""
    source: str = "built-in"
    info: dict[str, Any] = field(default_factory=dict)


class Registry:
    """Name → component for one kind of plugin. `builtins` names the module whose import registers vitx's own
    components of this kind. It is imported on the registry's first use, not with vitx: `vitx models` never
    imports torch, `vitx --help` only the torch-free evaluator files (for `vitx eval`'s commands)."""

    def __init__(self, kind: str, builtins: str | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._builtins = builtins

    def _load_builtins(self) -> None:
        """Register the built-ins first, so they come first in listings and a plugin may replace one."""
        if self._builtins:
            module, self._builtins = self._builtins, None  # before the import: it registers through us
            importlib.import_module(module)

    def register(self, name: str, obj: Any = None, *, description: str = "", source: str | None = None,
                 overwrite: bool = False, **info: Any) -> Any:
        """Register `obj` under `name`; without `obj`, return a decorator that does so."""
        self._load_builtins()

        def add(target: Any) -> Any:
            if name in self._entries and not overwrite:
                warnings.warn(f"{self.kind} '{name}' was already registered; replacing it", stacklevel=3)
            doc_lines = (getattr(target, "__doc__", None) or "").strip().splitlines() or [""]
            self._entries[name] = Entry(name, target, description or doc_lines[0], source or _source, dict(info))
            return target

        return add if obj is None else add(obj)

    def get(self, name: str) -> Entry:
        """The entry for `name`, or an error naming the closest registered names."""
        self._load_builtins()
        if name not in self._entries:
            discover(self.kind)
        if name in self._entries:
            return self._entries[name]
        close = difflib.get_close_matches(name, list(self._entries), n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(self._entries))}"
        raise UnknownNameError(f"unknown {self.kind} '{name}'{hint}")

    def names(self, pattern: str = "*") -> list[str]:
        """Registered names matching an fnmatch `pattern`, in registration order."""
        self._load_builtins()
        discover(self.kind)
        return [n for n in self._entries if fnmatch.fnmatchcase(n, pattern)]

    @contextlib.contextmanager
    def temporary(self) -> Iterator["Registry"]:
        """Registrations made inside the block are undone at its end (tests, notebooks). Installed plugins that
        the block happened to import first stay registered: they are part of the environment, and Python
        will not import them a second time."""
        self._load_builtins()
        saved = dict(self._entries)
        try:
            yield self
        finally:
            discovered = {k: e for k, e in self._entries.items()
                          if k not in saved and e.source.startswith("entry point")}
            self._entries = {**saved, **discovered}

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        self._load_builtins()
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        self._load_builtins()
        return len(self._entries)


BACKBONES = Registry("backbone", builtins="vitx.backbones")
OBJECTIVES = Registry("objective", builtins="vitx.objectives")
ADAPTERS = Registry("adapter", builtins="vitx.adapters")
TASKS = Registry("task", builtins="vitx.tasks")
EVALUATORS = Registry("evaluator", builtins="vitx.evaluators")  # frozen-feature evaluators: vitx eval NAME, --monitor-probes


def register_backbone(name: str, **kw: Any) -> Callable[[Any], Any]:
    """Decorator: register a backbone factory `fn(**overrides) -> nn.Module`."""
    return BACKBONES.register(name, **kw)


def register_objective(name: str, **kw: Any) -> Callable[[Any], Any]:
    """Decorator: register an objective class `cls(backbone, **options)`. Its declared `Options` (a dataclass of
    `vitx.option` fields, `objectives/options.py`) are checked here, so a malformed declaration fails when the
    plugin loads, not at a user's first run; the class learns the name it answers to (`cls.name`, in its messages)."""
    def add(cls: Any) -> Any:
        declared = getattr(cls, "Options", None)
        if declared is not None and not (dataclasses.is_dataclass(declared) and isinstance(declared, type)
                                         and all("help" in f.metadata for f in dataclasses.fields(declared))):
            raise TypeError(f"objective '{name}': Options must be a dataclass whose fields are vitx.option(...)s")
        if isinstance(cls, type) and hasattr(cls, "fit_to_data"):  # an Objective
            cls.name = name
        return OBJECTIVES.register(name, cls, **kw)

    return add


KINDS = {"backbones": BACKBONES, "objectives": OBJECTIVES, "adapters": ADAPTERS, "tasks": TASKS,
         "evaluators": EVALUATORS}


def load_builtins() -> None:
    """Register vitx's own components of every kind. The plugin loader calls it before importing a plugin, so
    that what a plugin imports from vitx is registered as built-in, not as the plugin's."""
    for reg in KINDS.values():
        reg._load_builtins()


@contextlib.contextmanager
def temporary() -> Iterator[None]:
    """Every registration of every kind made inside the block is undone at its end."""
    with contextlib.ExitStack() as stack:
        for reg in KINDS.values():
            stack.enter_context(reg.temporary())
        yield


def register_adapter(name: str, **kw: Any) -> Callable[[Any], Any]:
    """Decorator: register an adapter class `cls(**options)` (see `vitx.adapters.Adapter`)."""
    return ADAPTERS.register(name, **kw)


def register_evaluator(name: str, **kw: Any) -> Callable[[Any], Any]:
    """Decorator: register a frozen-feature evaluator class (see `vitx.evaluators.Evaluator`)."""
    return EVALUATORS.register(name, **kw)


def register_task(name: str, task: Any = None, **kw: Any) -> Any:
    """Register a transfer task (a `vitx.tasks.Task`) under `name`, e.g. `vtab/dtd`; without `task`, a decorator
    for a function returning one."""
    return TASKS.register(name, task, **kw)
