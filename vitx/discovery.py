"""Plugin discovery: installed packages that declare an entry point, and single files or modules named with
`--plugin` or the VITX_PLUGINS environment variable (separated by the path separator, ':').

Importing a plugin registers its components (objectives, backbones, adapters, tasks). Entry points are package
metadata, read without importing anything; the group says what a plugin registers, so a plugin is imported only
when a component of its kind is needed: `vitx.objectives`, `vitx.backbones`, `vitx.adapters`, `vitx.tasks`, or
`vitx.plugins` for a plugin that may register any kind (imported at the first lookup of any kind). Each loads
once. A plugin that fails to import is reported in one line naming it, and the others still load. Set
VITX_NO_PLUGINS=1 to skip entry-point discovery.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable

from . import registry
from .errors import VitxError

GROUP = "vitx.plugins"  # a plugin that may register any kind
KIND_GROUPS = {"backbone": "vitx.backbones", "objective": "vitx.objectives", "adapter": "vitx.adapters",
               "task": "vitx.tasks", "evaluator": "vitx.evaluators"}  # a plugin that registers only that kind
loaded: dict[str, str] = {}  # plugin name → where it came from
failed: dict[str, str] = {}  # plugin name → one-line error
origins: dict[str, str] = {}  # plugin name → where it came from, loaded or not
_done: set[str] = set()  # entry-point groups already imported


def load_plugins(kind: str | None = None) -> None:
    """Import the installed plugins that may register components of `kind` ("objective", ...; every plugin
    when None), each once."""
    if os.environ.get("VITX_NO_PLUGINS") == "1":
        return
    for group in [GROUP, *([KIND_GROUPS[kind]] if kind in KIND_GROUPS else KIND_GROUPS.values())]:
        if group not in _done:
            _done.add(group)
            for ep in entry_points(group=group):  # a package may name itself in several groups: loaded once
                _load(ep.name, f"entry point {ep.name} ({ep.dist.name if ep.dist else ep.value})", ep.load)


def load_plugin(target: str, strict: bool = False, given: str = "--plugin") -> bool:
    """Import one plugin: a `.py` file or an importable module name. Reports a failure in one line (`strict`:
    as an error, for a command that would otherwise do its work without the plugin the user named; `given`:
    where it was named, --plugin or VITX_PLUGINS), returns whether it loaded. Loading the same target twice
    does nothing."""
    is_file = target.endswith(".py") or os.sep in target
    done = _load(target, f"file {target}" if is_file else f"module {target}",
                 lambda: _exec_file(target) if is_file else importlib.import_module(target), warn=not strict)
    if strict and not done:
        raise VitxError(f"plugin {target} ({given}) failed to load: {failed[target]}; the command would run without "
                        "it (`vitx plugins` lists what loaded)")
    return done


def _load(name: str, origin: str, load: Callable[[], object], warn: bool = True) -> bool:
    """Run `load` once per plugin name, crediting what it registers to `origin`; whether the plugin loaded."""
    if name in loaded or name in failed:
        return name in loaded
    registry.load_builtins()
    origins[name] = origin
    try:
        with registry.registering_from(origin):
            load()
        loaded[name] = origin
        return True
    except (Exception, SystemExit) as exc:  # a broken plugin (or one that exits) must not take the toolkit down
        failed[name] = f"it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else \
            f"{type(exc).__name__}: {exc}".splitlines()[0]
        if warn:
            print(f"warning: vitx plugin '{name}' failed to load: {failed[name]}", file=sys.stderr)
        return False


def _exec_file(target: str) -> None:
    path = Path(target).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no such file {path}")
    spec = importlib.util.spec_from_file_location(f"vitx_plugin_{path.stem}", path)
    sys.modules[spec.name] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def load_env_plugins(strict: bool = False) -> None:
    """The plugins VITX_PLUGINS names (files or modules, separated by os.pathsep); `strict`: as load_plugin."""
    for target in filter(None, os.environ.get("VITX_PLUGINS", "").split(os.pathsep)):
        load_plugin(target.strip(), strict, "VITX_PLUGINS")


registry.discover = load_plugins  # the registry asks for a kind's plugins before its first lookup
