"""Transfer adapters, registered by name: `create_adapter("resize-posemb(mode='bilinear')")`, `resolve_adapters`."""
from __future__ import annotations

import difflib
import inspect
from typing import Any, Iterable

from ..errors import VitxError
from ..registry import ADAPTERS
from ..spec import parse_spec
from . import bitfit, head, methods, posemb, ssf, vpt  # noqa: F401  (registers the built-in adapters)
from .base import ROLES, AdaptContext, Adapter, trainable_parameters
from .posemb import resample_pos_embed, resize_backbone

__all__ = ["ROLES", "AdaptContext", "Adapter", "DEFAULTS", "adapter_options", "create_adapter", "resample_pos_embed",
           "resize_backbone", "resolve_adapters", "trainable_parameters"]

DEFAULTS = {"input": "resize-posemb", "head": "zero-head", "method": "finetune"}


def adapter_options(cls: type) -> dict[str, Any] | None:
    """An adapter class's options and their defaults (its __init__'s keyword parameters); None when it takes any
    (**kwargs)."""
    if cls.__init__ is Adapter.__init__:
        return {}
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # (self)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def create_adapter(spec: str) -> Adapter:
    """Build an adapter from `name(option=value, ...)`."""
    name, options = parse_spec(spec)
    entry = ADAPTERS.get(name)
    cls = entry.obj
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):  # a plugin's: one line, not an AttributeError later
        raise VitxError(f"adapter '{name}' ({entry.source}) is registered as {type(cls).__name__} "
                        f"{getattr(cls, '__name__', '')}, not a subclass of vitx.adapters.Adapter".replace("  ", " "))
    known = adapter_options(cls)
    unknown = sorted(set(options) - set(known)) if known is not None else []
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(known), n=1)
        raise VitxError(f"adapter '{name}' has no option '{unknown[0]}'" + (f"; did you mean {close[0]}?" if close else "")
                        + f" (its options: {', '.join(known) if known else 'none'})")
    try:
        adapter = cls(**options)
    except TypeError as exc:
        raise VitxError(f"bad options for adapter '{name}': {exc}") from None
    adapter.name = name
    if getattr(adapter, "role", None) not in ROLES:
        raise VitxError(f"adapter '{name}' has role {getattr(adapter, 'role', None)!r}; roles are {', '.join(ROLES)}")
    return adapter


def resolve_adapters(specs: Iterable[str] = ()) -> list[Adapter]:
    """One adapter per role, in role order: the named ones, defaults for the rest. Two for one role is an error."""
    chosen: dict[str, Adapter] = {}
    for spec in specs:
        adapter = create_adapter(spec)
        if adapter.role in chosen:
            raise VitxError(f"adapters '{chosen[adapter.role].name}' and '{adapter.name}' both set the "
                            f"{adapter.role}; give one")
        chosen[adapter.role] = adapter
    return [chosen.get(role) or create_adapter(DEFAULTS[role]) for role in ROLES]
