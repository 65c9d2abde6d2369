"""Settings declared once: a config dataclass field with its help, panel, bounds and choices, from which the
command-line options, their validation, `--set`/recipes (`recipe.py`) and the export's command rebuilding all
come. Torch-free: `vitx --help` reads it.

    lr: float = setting(2e-3, "Peak learning rate.", OPTIMISATION, above=0)

A field made with `setting` is an option `--lr` of its command (`flag=` names another, `cli=False` none);
`choices`, `min` (inclusive), `above` (exclusive), `max` and `below` (exclusive) bound it, and `check` refuses
values outside them in one line naming the option; `renamed` keeps a choice's former name working, `formerly`
a setting's (its option, hidden from --help but named in its help, and its key in recipes, --set and recorded
runs: `current_keys`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable

from ..errors import VitxError

# Help panels, in the order `--help` shows them (timm's train.py groups its arguments the same way)
MODEL, DATA, OPTIMISATION, SCHEDULE, PROTOCOL = "Model", "Data", "Optimisation", "Schedule", "Protocol"
EVALUATION, CHECKPOINTS, OUTPUT, SYSTEM = "Evaluation", "Checkpoints and resumption", "Output", "System"
PANELS = (MODEL, DATA, PROTOCOL, OPTIMISATION, SCHEDULE, EVALUATION, CHECKPOINTS, OUTPUT, SYSTEM)


class Choices(tuple):
    """Choices with their former names (`renamed`, former → current): a table of choices that several settings
    share (the runner's CHOICES) hands the renames to each setting made with it."""

    renamed: dict[str, str]

    def __new__(cls, values: Iterable[Any], renamed: dict[str, str] | None = None) -> "Choices":
        made = super().__new__(cls, values)
        made.renamed = dict(renamed or {})
        return made


def setting(default: Any, help: str, group: str, *, flag: str | None = None, choices: Iterable[Any] | None = None,
            min: float | None = None, above: float | None = None, max: float | None = None,
            below: float | None = None, limit: int | None = None, cli: bool = True, repeat: bool = False,
            shown: str | None = None, says: str | None = None, example: str | None = None, affects_result: bool = True,
            length: int | None = None, distinct: bool = False, formerly: str | None = None,
            renamed: dict[str, str] | None = None) -> Any:
    """A config field with everything its option needs. `default` may be a list (copied per instance);
    `shown` replaces the "[default: ...]" of --help (None: the default itself); `repeat`: a list option given
    once per item (`--adapter a --adapter b`) instead of comma-separated; `limit`: a size far above any real
    run (1000000 typed for 1000 is refused instead of allocating for minutes); `says`: the refusal's own words;
    `example`: a value shown when a list option cannot be read (default: the default); `affects_result=False`: the
    setting does not change what a run computes (where it writes, how it logs), so a resumed run may change it;
    `length`: a list setting's exact number of items (3 for a per-RGB-channel value); `distinct`: a list setting
    whose items must differ (seeds: a repeated one would count one run twice and shrink the spread); `formerly`:
    the option's old name, which users already type: it keeps working, and --help says so; `renamed`: former
    value → current value of a renamed choice (default: the `Choices`' own), which recipes, old command lines,
    plugins and the config.json of runs made before the rename still hold: `check` reads the former as the
    current, and --help says so (those whose current value is not one of `choices` are left out)."""
    if group not in PANELS:
        raise ValueError(f"unknown panel {group!r}")
    renamed = renamed if renamed is not None else getattr(choices, "renamed", None)
    choices = tuple(choices) if choices is not None else None
    renamed = {old: new for old, new in (renamed or {}).items() if choices is None or new in choices} or None
    meta = {"help": help, "group": group, "flag": flag, "choices": choices,
            "min": min, "above": above, "max": max, "below": below, "limit": limit, "cli": cli, "repeat": repeat,
            "shown": shown, "says": says, "example": example, "affects_result": affects_result, "length": length,
            "distinct": distinct, "formerly": formerly, "renamed": renamed}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def with_default(group: type, name: str, default: Any) -> Any:
    """Setting `name` of a group (`settings/groups.py`) with this config's own default: pre-training's and
    fine-tuning's recipes differ (AdamW against SGD, say), the declaration (help, panel, bounds) stays the group's."""
    field = next(f for f in dataclasses.fields(group) if f.name == name)
    return setting(default, **field.metadata)


def groups_of(cls: type) -> list[type]:
    """The setting groups (`settings/groups.py`) a config composes, in its bases' order."""
    return [base for base in cls.__mro__[1:] if base.__dict__.get("is_group")]  # not inherited: a config is none


def shared_values(config: Any, cls: type) -> dict[str, Any]:
    """`config`'s values of every setting in the groups it composes alike with config class `cls`: how a transfer
    hands its run settings to the runner's config, none copied by hand."""
    shared = [g for g in groups_of(type(config)) if g in groups_of(cls)]
    return {f.name: getattr(config, f.name) for g in shared for f in dataclasses.fields(g)}


def declared(cls: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are settings, in reading order: by help panel (PANELS), within one
    the config's own fields before its groups' (a command's --help and a rebuilt command line start with what
    the command is about), each in declaration order."""
    fields = [f for f in dataclasses.fields(cls) if "group" in f.metadata]
    shared = {f.name for g in groups_of(cls) for f in dataclasses.fields(g)}
    return sorted(fields, key=lambda f: (PANELS.index(f.metadata["group"]), f.name in shared))


def flag_of(field: dataclasses.Field) -> str:
    """`--output-dir` for output_dir, or the field's own flag (`--from` for start)."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def flags(cls: type) -> dict[str, str]:
    """Setting name → its option, for the settings that have one."""
    return {f.name: flag_of(f) for f in declared(cls) if f.metadata["cli"]}


def as_flags(settings: dict[str, Any], cls: type) -> list[str]:
    """Settings of config class `cls` as its command's options: each setting's own flag (`--from` for start),
    --x / --no-x for a boolean, one option per item for a repeated setting, a list comma-separated. The one
    place settings become a command line (export's model card, tests, benchmarks)."""
    fields = {f.name: f for f in declared(cls)}
    out: list[str] = []
    for key, value in settings.items():
        field = fields[key]
        flag = flag_of(field)
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif field.metadata["repeat"]:
            out += [part for item in value for part in (flag, str(item))]
        elif isinstance(value, list):
            out += [flag, ",".join(str(v) for v in value)]
        else:
            out += [flag, str(value)]
    return out


def result_settings(cls: type) -> list[str]:
    """The settings that change a run's result: a resumed run must keep them (the others it may change)."""
    return [f.name for f in declared(cls) if f.metadata["affects_result"]]


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()  # type: ignore[misc]


def defaults(cls: type) -> dict[str, Any]:
    return {f.name: _default(f) for f in dataclasses.fields(cls)}


def shown_default(field: dataclasses.Field) -> str:
    """What --help shows as the default."""
    if field.metadata.get("shown") is not None:
        return field.metadata["shown"]
    value = _default(field)
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "none"
    return "none" if value in (None, "") else str(value)


def _bounds(meta: dict[str, Any]) -> str:
    """What a bounded setting must be: "be positive", "not be negative", "be in [0, 1)", "be at least -1"."""
    lo = f"[{meta['min']:g}" if meta["min"] is not None else f"({meta['above']:g}" if meta["above"] is not None else ""
    hi = f"{meta['max']:g}]" if meta["max"] is not None else f"{meta['below']:g})" if meta["below"] is not None else ""
    if lo and hi:
        return f"be in {lo}, {hi}"
    if meta["above"] == 0:
        return "be positive"
    if meta["min"] == 0:
        return "not be negative"
    if lo:
        return f"be {'at least' if meta['min'] is not None else 'above'} {lo[1:]}"
    return f"be {'at most' if meta['max'] is not None else 'below'} {hi[:-1]}"


def _refuse(field: dataclasses.Field, value: Any, what: str, named: Callable[[dataclasses.Field], str],
            own_words: bool = True) -> VitxError:
    """One line naming the setting (`named`: its option by default); a bound refusal in the setting's own words
    (`says`) when it has them."""
    says = field.metadata["says"] if own_words else None
    shown = f"'{value}'" if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    return VitxError(f"{named(field)} {says or what}, got {shown}")


def check_field(field: dataclasses.Field, value: Any, named: Callable[[dataclasses.Field], str] = flag_of) -> None:
    """One setting's value against its declaration: finite, within its bounds, one of its choices."""
    meta = field.metadata
    if isinstance(value, str) and str(field.type).startswith("list["):  # (a config built in Python: its items
        # would otherwise be the text's characters, adapters 'l', 'o', 'r', 'a')
        raise VitxError(f"{named(field)} takes a list, e.g. [{value!r}]; got the text {value!r}")
    if meta.get("length") is not None and isinstance(value, list) and len(value) != meta["length"]:
        example = meta["example"] or ",".join(["1"] * meta["length"])
        raise VitxError(f"{named(field)} takes {meta['length']} values, e.g. {example}; got {value}")
    if meta.get("distinct") and isinstance(value, list) and len(set(value)) != len(value):
        repeated = next(v for i, v in enumerate(value) if v in value[:i])
        example = meta["example"] or ",".join(str(v) for v in dict.fromkeys(value))
        raise VitxError(f"{named(field)} takes distinct values, e.g. {example}; got {repeated} twice in "
                        f"{','.join(map(str, value))}")
    for item in value if isinstance(value, list) else [value]:
        if item is None:
            continue
        if meta["choices"] is not None and item not in meta["choices"]:
            raise _refuse(field, item, f"must be one of {', '.join(map(str, meta['choices']))}", named, own_words=False)
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            continue
        if isinstance(item, float) and not math.isfinite(item):
            raise _refuse(field, value, "must be a finite number" if not isinstance(value, list) else
                          "must be finite numbers", named, own_words=False)
        low = (meta["min"] is not None and item < meta["min"]) or (meta["above"] is not None and item <= meta["above"])
        high = (meta["max"] is not None and item > meta["max"]) or (meta["below"] is not None and item >= meta["below"])
        if low or high:
            raise _refuse(field, item, f"must {_bounds(meta)}", named)
        if meta["limit"] is not None and item > meta["limit"]:
            raise VitxError(f"{named(field)} {item} is too large: at most {meta['limit']:,}, far above any "
                            "real run (a typo?)")


def current(field: dataclasses.Field, value: Any) -> Any:
    """`value` with a former name of one of the setting's choices (`renamed`) read as its current name, item by
    item in a list."""
    renamed = field.metadata.get("renamed")
    if not renamed:
        return value
    if isinstance(value, list):
        items = [renamed.get(item, item) if isinstance(item, str) else item for item in value]
        return items if items != value else value
    return renamed.get(value, value) if isinstance(value, str) else value


def current_values(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Recorded settings of config class `cls` (an older run's transfer.json) with former names read as current:
    a record written before a rename compares equal to the config made now."""
    fields = {f.name: f for f in declared(cls)}
    return {key: current(fields[key], value) if key in fields else value for key, value in values.items()}


def former_key(field: dataclasses.Field) -> str | None:
    """The key a renamed setting had (`init` for `start`, whose option was --init): its former option's name as
    recipes, --set and the config.json of runs made before the rename write it."""
    old = field.metadata.get("formerly")
    return old[2:].replace("-", "_") if old else None


def former_keys(cls: type) -> dict[str, str]:
    """Former key → current key, for the settings of `cls` that were renamed."""
    return {former_key(f): f.name for f in declared(cls) if former_key(f) not in (None, f.name)}  # type: ignore[misc]


def current_keys(cls: type, values: dict[str, Any], where: str = "") -> dict[str, Any]:
    """`values` (a recipe's table, --set, a recorded config.json) with each setting's former key (`former_key`)
    read as its current one. Both at once: one line naming `where` they came from (a recorded config keeps the
    current one)."""
    out = dict(values)
    for old, new in former_keys(cls).items():
        if old in out:
            value = out.pop(old)
            if new in out and where:
                raise VitxError(f"{where}: {new} is given twice, as {new} and as its former name {old}; keep {new}")
            out.setdefault(new, value)
    return out


def check(config: Any, named: Callable[[dataclasses.Field], str] = flag_of) -> None:
    """Every declared setting of `config` within its declaration (the first violation, in one line naming the
    setting as `named` says: its option by default), after a former name of a choice is replaced by its
    current one (in place, frozen configs too), so what runs and what is recorded use the current name; then the
    rule of each group it composes (a group's `check_group`: a tracker that cannot start, a policy timm does not
    know)."""
    for field in declared(type(config)):
        value = getattr(config, field.name)
        now = current(field, value)
        if now is not value:
            object.__setattr__(config, field.name, now)
    for field in declared(type(config)):
        check_field(field, getattr(config, field.name), named)
    for group in groups_of(type(config)):  # each group's own rule (settings/groups.py), in every config alike
        if "check_group" in group.__dict__:
            group.check_group(config)


def help_text(field: dataclasses.Field) -> str:
    """The option's help with its default (typer prints brackets literally when escaped)."""
    old = field.metadata.get("formerly")
    also = f" Its former name {old} still works." if old and old not in field.metadata["help"] else ""
    renamed = field.metadata.get("renamed")
    if renamed:
        also += " Former value names still work: " + ", ".join(f"{a} (now {b})" for a, b in renamed.items()) + "."
    return f"{field.metadata['help']}{also} \\[default: {shown_default(field)}]"


__all__ = ["as_flags", "CHECKPOINTS", "Choices", "current", "current_keys", "current_values", "former_key", "former_keys", "DATA", "EVALUATION", "MODEL", "OPTIMISATION", "OUTPUT", "PANELS", "PROTOCOL", "SCHEDULE",
           "SYSTEM", "check", "check_field", "declared", "defaults", "groups_of", "shared_values", "with_default", "flag_of", "flags", "help_text", "result_settings", "setting",
           "shown_default"]
