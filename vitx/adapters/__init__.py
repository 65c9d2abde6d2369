"""Transfer adapters, registered by name: `create_adapter("resize-posemb(mode='bilinear')")`, `resolve_adapters`."""
from __future__ import annotations

from typing import Iterable

from ..errors import VitxError
from ..registry import ADAPTERS
from ..spec import parse_spec
from . import bitfit, head, methods, posemb, ssf, vpt  # noqa: F401  (registers the built-in adapters)
from .base import ROLES, AdaptContext, Adapter, trainable_parameters
from .posemb import resample_pos_embed, resize_backbone

__all__ = ["ROLES", "AdaptContext", "Adapter", "DEFAULTS", "create_adapter", "resample_pos_embed",
           "resize_backbone", "resolve_adapters", "trainable_parameters"]

DEFAULTS = {"input": "resize-posemb", "head": "zero-head", "method": "finetune"}


def create_adapter(spec: str) -> Adapter:
    """Build an adapter from `name(option=value, ...)`."""
    name, options = parse_spec(spec)
    cls = ADAPTERS.get(name).obj
    if options and isinstance(cls, type) and cls.__init__ is Adapter.__init__:  # no options of its own
        raise VitxError(f"bad options for adapter '{name}': it takes none, got {', '.join(sorted(options))}")
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
