"""Lazy package exports (PEP 562): a package names what it offers, and the module holding it is imported on
first use. This keeps `import vitx`, `vitx --help` and the listings free of torch, timm and datasets, which
take seconds to import; a command that trains pays for them when it runs."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: `exports` maps a public name to the submodule (relative, e.g.
    `.loop`) that defines it. A name is imported once, then cached on the package."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
