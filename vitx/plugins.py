"""Plugin discovery: installed packages that declare an entry point in the group `vitx.plugins`.

Importing a plugin registers its components (objectives, backbones, ...). Plugins load once, on the first
registry lookup or listing. A plugin that fails to import is reported in one line naming it, and the others still
load. Set VITX_NO_PLUGINS=1 to skip discovery.
"""
from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points

GROUP = "vitx.plugins"
loaded: dict[str, str] = {}  # plugin name → where it came from
failed: dict[str, str] = {}  # plugin name → one-line error
_done = False


def load_plugins() -> None:
    """Import every installed `vitx.plugins` entry point, once."""
    global _done
    if _done or os.environ.get("VITX_NO_PLUGINS") == "1":
        return
    _done = True
    from . import registry

    for ep in entry_points(group=GROUP):
        origin = f"entry point {ep.name} ({ep.dist.name if ep.dist else ep.value})"
        registry.current_source = origin
        try:
            ep.load()
            loaded[ep.name] = origin
        except Exception as exc:  # a broken plugin must not take the toolkit down
            failed[ep.name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(f"warning: vitx plugin '{ep.name}' failed to load: {failed[ep.name]}", file=sys.stderr)
        finally:
            registry.current_source = "built-in"
