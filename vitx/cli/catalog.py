"""The listings, as tables: `vitx models`, `vitx objectives` (what pre-training can use), `vitx adapters`,
`vitx tasks` (what transfer can use) and `vitx plugins`."""
from __future__ import annotations

import dataclasses
import fnmatch
from typing import Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import discovery as plugin_state
from ..backbones import BackboneSpec
from ..console import say
from ..registry import ADAPTERS, BACKBONES, KINDS, OBJECTIVES, TASKS


def _wide() -> Console:
    """Tables stay readable when piped (no terminal width): at least 150 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, 150))


def _table(title: str, columns: Sequence[str], right: Sequence[str] = ()) -> Table:
    """A titled table with these columns, left-justified but for those in `right`."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right" if col in right else "left")
    return table


def models(pattern: str = typer.Argument("*", help="fnmatch filter, e.g. 'vit-b*'.")) -> None:
    """List the registered backbones (and how to name any timm ViT)."""
    sizes = ("layers", "width", "MLP", "heads", "patch", "image", "params")
    table = _table("vitx backbones", ("name", *sizes), right=sizes)
    for name in BACKBONES.names(pattern):
        spec = BACKBONES.get(name).obj
        if isinstance(spec, BackboneSpec):
            patch = f"{spec.patch}" if spec.stride is None else f"1 (s{spec.stride})"
            cells = [spec.depth, spec.width, spec.mlp, spec.heads, patch, spec.img_size]
            params = spec.num_parameters()  # from the table row: no network is built
        else:  # a user factory: built on the meta device
            from ..backbones import count_parameters
            from ..errors import VitxError

            cells = ["-"] * 6
            try:
                params = count_parameters(name)
            except VitxError as exc:  # the listing goes on; the broken entry says why
                typer.echo(f"warning: {exc}", err=True)
                params = None
        table.add_row(name, *map(str, cells), f"{params / 1e6:.1f}M" if params is not None else "?")
    table.caption = "also: timm:<any timm ViT name>, e.g. timm:vit_small_patch16_224 (params: backbone, no head)"
    Console().print(table)


def objectives(pattern: str = typer.Argument("*", help="fnmatch filter; one name lists its options."),
               options: bool = typer.Option(False, "--options", help="List the options of every objective shown.")
               ) -> None:
    """List the pre-training objectives (use with `vitx pretrain --objective NAME(options)`) and their options."""
    import vitx.objectives  # noqa: F401  (registers the built-in objectives)

    names = OBJECTIVES.names(pattern)
    table = _table("vitx objectives", ("name", "labels", "description", "options", "from"), right=("options",))
    for name in names:
        entry = OBJECTIVES.get(name)
        declared = getattr(entry.obj, "Options", None)
        count = str(len(dataclasses.fields(declared))) if declared is not None else "-"
        table.add_row(name, "yes" if getattr(entry.obj, "needs_labels", False) else "no", escape(entry.description),
                      count, entry.source)
    if len(names) != 1 and not options:
        table.caption = "vitx objectives NAME lists its options (type, default, bounds, help); --options: all of them"
    console = _wide()
    console.print(table)
    if len(names) == 1 or options:
        for name in names:
            _options_table(name, console)
    missing = [name for name in fnmatch.filter(PLUGIN_OBJECTIVES, pattern) if name not in OBJECTIVES.names()]
    if missing:  # a new user's first listing, before `pip install -e plugins/vitx-*`
        say(console, f"{_listed(missing)} come{'s' if len(missing) == 1 else ''} with vitx's own plugins, not "
                     f"installed here: pip install {' '.join(f'-e plugins/{PLUGIN_OBJECTIVES[n]}' for n in missing)} "
                     "(from a vitx checkout)")


PLUGIN_OBJECTIVES = {"mae": "vitx-mae", "simclr": "vitx-simclr", "dino": "vitx-dino"}  # plugins/: objective, package


def _listed(names: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def _options_table(name: str, console: Console) -> None:
    """One objective's declared options (`Objective.Options`): what `--objective 'NAME(key=value)'` takes."""
    from ..objectives.options import described

    declared = getattr(OBJECTIVES.get(name).obj, "Options", None)
    if declared is None:
        say(console, f"{name}: its options are not declared (its constructor's keywords)")
        return
    rows = described(declared)
    if not rows:
        say(console, f"{name}: no options")
        return
    table = _table(f"{name}(option=value, ...)", ("option", "type", "default", "bounds", "help"))
    for row in rows:
        table.add_row(*(escape(row[k]) for k in ("name", "type", "default", "bounds", "help")))
    console.print(table)


def adapters(pattern: str = typer.Argument("*", help="fnmatch filter.")) -> None:
    """List the transfer adapters (use with `vitx transfer --adapter NAME(options)`)."""
    from ..adapters import DEFAULTS, ROLES, Adapter, adapter_options

    def options(cls: object) -> str:
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            return "?"
        known = adapter_options(cls)
        return "any" if known is None else ", ".join(f"{k}={v!r}" for k, v in known.items()) or "none"

    table = _table("vitx adapters", ("name", "role", "default", "options", "description", "from"))
    def order(name: str) -> int:
        role = getattr(ADAPTERS.get(name).obj, "role", None)
        return ROLES.index(role) if role in ROLES else len(ROLES)

    for name in sorted(ADAPTERS.names(pattern), key=order):
        entry = ADAPTERS.get(name)
        role = getattr(entry.obj, "role", "?")
        table.add_row(name, role, "yes" if DEFAULTS.get(role) == name else "", escape(options(entry.obj)),
                      escape(entry.description), entry.source)
    table.caption = "one adapter per role (input, head, method); roles not named with --adapter take the default"
    _wide().print(table)


def tasks(pattern: str = typer.Argument("*", help="fnmatch filter, e.g. 'vtab/*'.")) -> None:
    """List the transfer tasks with their group, classes, label definition and data."""
    from ..errors import VitxError
    from ..tasks import get_task

    table = _table("vitx tasks", ("name", "group", "classes", "label", "data"), right=("classes",))
    for name in TASKS.names(pattern):
        try:
            task = get_task(name)
        except VitxError as exc:  # a plugin's broken task: listed, and said once, as `vitx models` does backbones
            typer.echo(f"warning: {exc}", err=True)
            table.add_row(name, "?", "?", "?", "?")
            continue
        where = ["embedded"] if task.embedded else []
        where += [f"hf:{task.hub}"] if task.hub else ["--data-dir"]
        table.add_row(name, task.group, str(task.num_classes), escape(task.label), escape(", ".join(where)))
    table.caption = "--data-dir DIR reads a local copy (hub WebDataset layout: train/*.tar, test/*.tar; or save_to_disk)"
    _wide().print(table)


def plugins() -> None:
    """List the plugins (built-in, entry points, --plugin files and modules) and their components."""
    plugin_state.load_plugins()
    by_source: dict[str, list[str]] = {}
    for kind, reg in KINDS.items():
        for entry in reg:
            by_source.setdefault(entry.source, []).append(f"{kind[:-1]} {entry.name}")
    table = _table("vitx plugins", ("plugin", "from", "status", "registered"))
    builtin = by_source.get("built-in", [])
    counts = {kind: sum(1 for c in builtin if c.startswith(kind[:-1] + " ")) for kind in KINDS}
    table.add_row("vitx", "built-in", "loaded", ", ".join(f"{n} {k}" for k, n in counts.items()))
    for name, origin in plugin_state.loaded.items():
        table.add_row(escape(name), escape(origin), "loaded", escape(", ".join(by_source.get(origin, [])) or "-"))
    for name, error in plugin_state.failed.items():
        table.add_row(escape(name), escape(plugin_state.origins.get(name, "")), f"[red]failed[/red]: {escape(error)}", "-")
    _wide().print(table)
