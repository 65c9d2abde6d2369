"""An objective's options, declared once: a dataclass whose fields are `option(...)`s, each with its type, default,
help and bounds (`settings.setting` without a command-line flag). From the declaration come the one-line refusal
of an unknown option, a wrong type or a value out of bounds (`check_options`), and `vitx objectives NAME`'s table
(`described`). Options sized by the data (DINO's teacher temperature and output dimension, say) are chosen by
the objective's `fit_to_data` and reported as a `Fitted`.

    @dataclass
    class SimCLROptions:
        temperature: float = option(0.5, "NT-Xent temperature.", above=0)
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any, Iterable

from ..errors import VitxError
from ..recipe import check_value, field_types, type_name
from ..settings import MODEL, check_field, setting


def option(default: Any, help: str, *, choices: Iterable[Any] | None = None, min: float | None = None,
           above: float | None = None, max: float | None = None, below: float | None = None,
           length: int | None = None, shown: str | None = None) -> Any:
    """One option of an objective: a dataclass field with its help and bounds (`min`/`max` inclusive, `above`/
    `below` exclusive; list options bound each item), checked as a setting is. An option that sizes memory (a
    head's width, a number of crops) takes a `max`: a typo must not allocate for minutes. `shown`: the default as
    `vitx objectives` says it, when the value alone would mislead (one chosen from the data)."""
    example = str(tuple(default)) if isinstance(default, list) else None  # as an option is written: (0.1, 2.0)
    return setting(default, help, MODEL, cli=False, choices=choices, min=min, above=above, max=max, below=below,
                   length=length, shown=shown, example=example)


@dataclass
class NoOptions:
    """The declaration of an objective that takes no options."""


def declared_options(cls: type) -> list[dataclasses.Field]:
    """The fields of an options dataclass, in declaration order."""
    return list(dataclasses.fields(cls))


def check_options(name: str, declaration: type, given: dict[str, Any]) -> Any:
    """`given` (keyword options, as `--objective 'name(k=v)'` parses them) as an instance of `declaration`: an
    unknown option, a value of the wrong type or one out of its bounds is one line naming the objective and the
    option. Tuples become lists for list options (`blur_sigma=(0.1, 2.0)`)."""
    kinds = field_types(declaration)
    unknown = [k for k in given if k not in kinds]
    if unknown:
        if not kinds:
            raise VitxError(f"{name} has no options; got {', '.join(sorted(unknown))}")
        close = difflib.get_close_matches(unknown[0], sorted(kinds), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"its options: {', '.join(kinds)}"
        raise VitxError(f"{name} has no option '{unknown[0]}'; {hint} (vitx objectives {name} lists them)")
    values: dict[str, Any] = {}
    for key, value in given.items():
        raw = list(value) if isinstance(value, tuple) else value
        try:
            values[key] = check_value(kinds[key], raw, False)
        except ValueError:
            raise VitxError(f"{name} {key} must be {type_name(kinds[key])}, got {value!r}") from None
    made = declaration(**values)
    for f in declared_options(declaration):
        check_field(f, getattr(made, f.name), named=lambda f: f"{name} {f.name}")
    return made


def bounds(f: dataclasses.Field) -> str:
    """An option's bounds as intervals read: '[1, 262144]', '(0, 1)', '≥ 0', 'mean, sinkhorn', '' (none)."""
    meta = f.metadata
    if meta["choices"] is not None:
        return ", ".join(map(str, meta["choices"]))
    lo = f"[{meta['min']:g}" if meta["min"] is not None else f"({meta['above']:g}" if meta["above"] is not None else ""
    hi = f"{meta['max']:g}]" if meta["max"] is not None else f"{meta['below']:g})" if meta["below"] is not None else ""
    if lo and hi:
        text = f"{lo}, {hi}"
    elif lo:
        text = f"{'≥' if lo[0] == '[' else '>'} {lo[1:]}"
    elif hi:
        text = f"{'≤' if hi[-1] == ']' else '<'} {hi[:-1]}"
    else:
        text = ""
    if meta.get("length"):
        text = f"{meta['length']} values" + (f", each {text}" if text else "")
    return text


def described(declaration: type) -> list[dict[str, str]]:
    """Each option as `vitx objectives NAME` lists it: name, type, default, bounds, help."""
    from ..recipe import field_types
    from ..settings import shown_default

    kinds = field_types(declaration)
    def default(f: dataclasses.Field) -> str:  # a list as it is written in a spec: (0.1, 2.0)
        value = f.default_factory() if f.default is dataclasses.MISSING else None  # type: ignore[misc]
        return str(tuple(value)) if isinstance(value, list) and f.metadata["shown"] is None else shown_default(f)

    return [{"name": f.name, "type": type_name(kinds[f.name]).removeprefix("an ").removeprefix("a "),
             "default": default(f), "bounds": bounds(f), "help": f.metadata["help"]}
            for f in declared_options(declaration)]


@dataclass(frozen=True)
class Fitted:
    """Options an objective chose from the data because the user left them unset (`Objective.fit_to_data`):
    the values, the number of training images they were fitted to, and the rule with its source."""

    values: dict[str, Any]
    images: int
    rule: str  # whose rule, and where it is written: "lightly-train's rule, _methods/dino/dino.py:86-124"

    def line(self, name: str) -> str:
        """The run header's line: what was chosen, from what, by whose rule, and how to override it."""
        chosen = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.values.items())
        return f"{name}: {chosen} fitted to {self.images:,} training images ({self.rule}); set them to override"

    def record(self) -> dict[str, Any]:
        """What config.json keeps (`objective.fitted`): a resumed run is built with these values again."""
        return {"values": dict(self.values), "images": self.images, "rule": self.rule}


__all__ = ["Fitted", "NoOptions", "bounds", "check_options", "declared_options", "described", "option"]
