"""A command's options made from its config's declared settings (`vitx/settings/`): one typer option per
setting, in its help panel, with its help and default; plus the options every training command shares (a
recipe file, `--set` overrides of any setting, `--resume`)."""
from __future__ import annotations

import inspect
import typing
from typing import Any, Callable, List, Optional

import typer

from ..errors import VitxError
from ..recipe import field_types, optional_of
from ..settings import CHECKPOINTS, declared, flag_of, help_text

RECIPE = typer.Option(None, "--recipe", help="A recipe file (TOML, see recipes/); options and --set override it.")
SET = typer.Option([], "--set", help="key=value, repeatable: any setting by its name, type-checked.")


def number_list(text: str, kind: type, flag: str, example: str) -> list:
    """`--lrs 0.01,0.03`-style values; `example` shows the form in the error."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        what = "whole numbers" if kind is int else "numbers"
        raise VitxError(f"{flag} takes comma-separated {what}, e.g. {flag} {example}; got '{text}'") from None
    if not values:
        raise VitxError(f"{flag} is empty: give at least one value, e.g. {flag} {example}")
    return values


def _parameter(field: Any, kind: Any) -> inspect.Parameter:
    flag, inner = flag_of(field), optional_of(kind) or kind
    if field.metadata["repeat"]:  # given once per item
        default, names, annotation = [], [flag], List[str]
    else:  # None: not given (the config's default holds)
        default, names = None, [f"{flag}/--no-{flag[2:]}"] if inner is bool else [flag]
        annotation = Optional[str] if typing.get_origin(inner) is list else Optional[inner]
    option = typer.Option(default, *names, help=help_text(field), rich_help_panel=field.metadata["group"],
                          show_default=False)
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


FORMER = "_formerly"  # the parameter suffix of a setting's former option (`start_formerly`: --init)


def _former(field: Any, kind: Any) -> inspect.Parameter | None:
    """A renamed setting's former option (`formerly`), hidden: it keeps working in users' commands and scripts,
    and the setting's help names it (`help_text`), so --help lists each setting once, under its current name."""
    old = field.metadata.get("formerly")
    if not old or field.metadata["repeat"]:
        return None
    inner = optional_of(kind) or kind
    names = [f"{old}/--no-{old[2:]}"] if inner is bool else [old]
    annotation = Optional[str] if typing.get_origin(inner) is list else Optional[inner]
    return inspect.Parameter(field.name + FORMER, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(None, *names, hidden=True, show_default=False))


def _parsed(field: Any, kind: Any, value: Any) -> Any:
    """A list setting's comma-separated text as its list (numbers as numbers)."""
    inner = optional_of(kind) or kind
    if typing.get_origin(inner) is not list or field.metadata["repeat"]:
        return value
    item = typing.get_args(inner)[0]
    if item is str:
        from ..spec import split_specs

        return split_specs(value, flag_of(field))
    example = field.metadata["example"] or ",".join(str(v) for v in (field.default_factory() or []))  # type: ignore[misc]
    return number_list(value, item, flag_of(field), example)


def command(cls: type, run: Callable[[dict[str, Any], bool, Optional[str], list[str]], None],
            name: str, doc: str, training: bool = True) -> Callable[..., None]:
    """A typer command with one option per declared setting of `cls` (in its panel), and for a `training`
    command --recipe, --set and --resume; it calls `run(options, resume, recipe, sets)` with the settings given
    on the command line."""
    kinds = field_types(cls)
    fields = [f for f in declared(cls) if f.metadata["cli"]]
    params = [_parameter(f, kinds[f.name]) for f in fields]
    params += [p for p in (_former(f, kinds[f.name]) for f in fields) if p is not None]
    params += [
        inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, annotation=bool, default=typer.Option(
            False, "--resume", help="Continue the run in --output-dir from its last checkpoint.",
            rich_help_panel=CHECKPOINTS)),
        inspect.Parameter("recipe", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str], default=RECIPE),
        inspect.Parameter("set_", inspect.Parameter.KEYWORD_ONLY, annotation=List[str], default=SET),
    ] if training else []

    def handler(**given: Any) -> None:
        options = {}
        for field in fields:
            value, former = given.get(field.name), given.get(field.name + FORMER)
            if value is not None and former is not None:
                raise VitxError(f"{flag_of(field)} is given twice, as {flag_of(field)} and as its former name "
                                f"{field.metadata['formerly']}; keep {flag_of(field)}")
            value = former if value is None else value
            if value is None or (field.metadata["repeat"] and not value):
                continue
            options[field.name] = _parsed(field, kinds[field.name], value)
        run(options, bool(given.get("resume")), given.get("recipe"), list(given.get("set_") or []))

    handler.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    handler.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    handler.__name__ = handler.__qualname__ = name
    handler.__doc__ = doc
    return handler


__all__ = ["RECIPE", "SET", "command", "number_list"]
