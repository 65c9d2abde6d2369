"""Recipes: a run's settings as data (a TOML file), with `--set key=value` and the command's options on top.

A recipe file holds one table per command it configures, keyed like the command's config fields:

    [pretrain]
    model = "vit-b/16"
    lr = 1e-3

Precedence, lowest first: the config's defaults, the recipe, `--set`, the command's own options. A key given both
by `--set` and by its option is an error (one of them would be silently lost). Every value is checked against the
config field's type; an unknown key is an error naming the close matches."""
from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from pathlib import Path
from typing import Any

from .errors import VitxError
from .settings import current_keys, flags, former_keys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def field_types(cls: type) -> dict[str, Any]:
    """The config dataclass's fields and their resolved types."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def type_name(kind: Any) -> str:
    """A field type as a refusal names it: 'an integer', 'a number or none', 'a list of numbers' (recipes, --set and
    objective options say a wrong type with it)."""
    if optional_of(kind) is not None:
        return f"{type_name(optional_of(kind))} or none"
    if typing.get_origin(kind) is list:
        item = typing.get_args(kind)[0]
        return "a list of " + {int: "integers", float: "numbers", str: "strings"}.get(item, str(item))
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(kind, str(kind))


def optional_of(kind: Any) -> Any:
    """X for `X | None`, else None."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0]
    return None


def _parse_text(text: str) -> Any:
    """A `--set` value as TOML reads it (numbers, true/false, [lists], "quoted"), else the bare text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _shown(value: Any) -> str:
    """A value as an error line quotes it: its start (a hostile one may be megabytes, or nested too deeply to
    repr)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except RecursionError:
        text = f"a {type(value).__name__} nested too deeply to show"
    return repr(text if len(text) <= 80 else f"{text[:77]}...")


def check_value(kind: Any, value: Any, from_text: bool) -> Any:
    """`value` as the field type `kind` wants it; raises ValueError when it cannot be one."""
    inner = optional_of(kind)
    if inner is not None:
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")
                             and (from_text or inner is not str)):
            return None  # (None in an option spec, 'none' or none typed, as the refusal's "or none" says)
        return check_value(inner, value, from_text)
    if typing.get_origin(kind) is list:
        item = typing.get_args(kind)[0]
        if from_text and isinstance(value, str) and item is not str:  # lrs=0.001,0.01
            value = [_parse_text(v.strip()) for v in value.split(",") if v.strip()]
        elif from_text and not isinstance(value, list):  # one item: adapters=lora(rank=4, alpha=8)
            value = [value]
        if not isinstance(value, list):
            raise ValueError
        return [check_value(item, v, from_text) for v in value]
    if kind not in (bool, int, float, str):
        return value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is float and number:
        return float(value)
    if isinstance(value, kind) and (kind is not int or number):  # already the field's type (True is no integer)
        return value
    if from_text and kind is bool and str(value).lower() in _TRUE + _FALSE:
        return str(value).lower() in _TRUE
    if from_text and kind is float and isinstance(value, str):  # .001 and 1. are numbers, though TOML says otherwise
        return float(value)
    if from_text and kind is str:  # e.g. --set model=1 is the text "1"
        return str(value)
    raise ValueError


def typed(cls: type, key: str, value: Any, where: str, from_text: bool = False) -> tuple[str, Any]:
    """(field name, checked value) for one setting, or a one-line error naming `where` it came from."""
    types_ = field_types(cls)
    name = key.strip().replace("-", "_")
    name = former_keys(cls).get(name, name)  # a renamed setting's former key (init: now start)
    if name not in types_:
        close = difflib.get_close_matches(name, sorted(types_), n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else f" (known: {', '.join(sorted(types_))})"
        raise VitxError(f"{where}: unknown key '{name}'{hint}")
    raw = value
    try:
        if from_text and isinstance(value, str):
            parsed = _parse_text(value)
            text_field = str in (types_[name], optional_of(types_[name]))
            raw = value if text_field and not isinstance(parsed, str) else parsed  # task=1e3 stays the text "1e3"
        return name, check_value(types_[name], raw, from_text)
    except RecursionError:  # (tomllib recurses once per level: a list 50,000 deep is no setting)
        raise VitxError(f"{where}: {name} is nested too deeply to read, got {_shown(value)}") from None
    except ValueError:
        raise VitxError(f"{where}: {name} must be {type_name(types_[name])}, got {_shown(value)}") from None


def load_recipe(path: str | Path, command: str, cls: type) -> dict[str, Any]:
    """The `[command]` table of a recipe file, every key known to `cls` and type-checked."""
    path = Path(path)
    if not path.is_file():
        raise VitxError(f"no recipe file {path}" + (" (it is a directory)" if path.is_dir() else ""))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise VitxError(f"{path} is not a valid TOML recipe ({exc})") from None
    except RecursionError:  # (tomllib recurses once per level of [[...]] or {a = {...}})
        raise VitxError(f"{path} is not a valid TOML recipe (nested too deeply to read: not a recipe)") from None
    except OSError as exc:
        raise VitxError(f"cannot read recipe {path} ({exc.strerror or exc})") from None
    tables = [k for k, v in data.items() if isinstance(v, dict)]
    if command not in data:
        has = f"it has [{'], ['.join(tables)}]" if tables else "it has no command table"
        raise VitxError(f"{path} has no [{command}] table ({has}); run it with the command it is for")
    section = data[command]
    if not isinstance(section, dict):
        raise VitxError(f"{path}: '{command}' must be a table ([{command}])")
    section = current_keys(cls, section, f"{path} [{command}]")  # (a key and its former name: one line)
    return dict(typed(cls, k, v, f"{path} [{command}]") for k, v in section.items())


def parse_sets(items: list[str], cls: type) -> dict[str, Any]:
    """`--set key=value` items, type-checked against `cls`."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise VitxError(f"--set takes key=value, got '{item}'")
        name, checked = typed(cls, key, value.strip(), "--set", from_text=True)
        if name in out:
            raise VitxError(f"--set {name} is given twice ({out[name]!r} and {checked!r}); keep one")
        out[name] = checked
    return out


def resolve(cls: type, command: str, recipe: str | None, sets: list[str], options: dict[str, Any]) -> dict[str, Any]:
    """The explicitly chosen settings: recipe, then --set, then the command's own (non-default) options."""
    chosen = load_recipe(recipe, command, cls) if recipe else {}
    overrides = parse_sets(sets, cls)
    both = sorted(set(overrides) & set(options))
    if both:
        k = both[0]
        flag = flags(cls).get(k, f"--{k.replace('_', '-')}")
        raise VitxError(f"{k} is given twice: {flag} {options[k]!r} and --set {k}={overrides[k]!r}; keep one")
    return {**chosen, **overrides, **options}


__all__ = ["check_value", "field_types", "load_recipe", "optional_of", "parse_sets", "resolve", "typed"]
