"""The HTML every page is made of: escaping, tables, sections and the document around them (its own CSS for the
screen and for print, system fonts only). Nothing here fetches anything: a page is one file that opens offline,
without JavaScript.

Text is escaped unless it is `Html` (markup made here, or by `svg.py`), so a run name, a task name or a setting
value can never inject markup.
"""
from __future__ import annotations

import html
import json
import math
from typing import Any, Iterable, Sequence


class Html(str):
    """Markup that is already safe: inserted as it is."""


def esc(value: Any) -> Html:
    """`value` as HTML text (escaped), or as it is when it is markup already."""
    return value if isinstance(value, Html) else Html(html.escape(str(value), quote=True))


def tag(name: str, *content: Any, **attrs: Any) -> Html:
    """`<name attrs>content</name>`; attribute names with `_` become `-` (`data_values` → `data-values`), a
    trailing `_` is dropped (`class_`), a value of None or False leaves the attribute out."""
    shown = "".join(f" {key.rstrip('_').replace('_', '-')}" + ("" if value is True else f'="{esc(value)}"')
                    for key, value in attrs.items() if value is not None and value is not False)
    return Html(f"<{name}{shown}>{''.join(esc(c) for c in content)}</{name}>")


def void(name: str, **attrs: Any) -> Html:
    """An element without content (`<img ...>`), attributes as `tag`'s."""
    return Html(tag(name, **attrs)[: -len(f"</{name}>")])


def join(parts: Iterable[Any], sep: str = "") -> Html:
    return Html(esc(sep).join(esc(p) for p in parts if p is not None and p != ""))


def code(text: Any) -> Html:
    return tag("code", text)


def para(*content: Any, class_: str | None = None) -> Html:
    return tag("p", *content, class_=class_)


def data_json(value: Any) -> str:
    """A figure's numbers for a data- attribute: JSON as Python wrote the run's files (the same floats)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def pct(value: Any, digits: int = 2) -> str:
    """0.4583 → '45.83%'; '—' for a missing value."""
    return "—" if not _number(value) else f"{100 * value:.{digits}f}%"


def pm(mean: Any, spread: Any, digits: int = 2) -> str:
    """'45.83% ± 1.17%' (the ± only where there is a spread)."""
    return pct(mean, digits) + (f" ± {pct(spread, digits)}" if _number(spread) else "")


def number(value: Any, digits: int = 4) -> str:
    """A metric as people read it: 4 significant digits; whole numbers with thousands separators."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}g}" if math.isfinite(value) else str(value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def table(header: Sequence[Any], rows: Iterable[Sequence[Any]], caption: Any = None, numeric: Iterable[int] = (),
          class_: str | None = None, marked: Iterable[int] = (), **attrs: Any) -> Html:
    """An HTML table: `numeric` columns right-aligned (figures line up), `marked` rows emphasised (a chosen
    point, a mean row)."""
    right, strong = set(numeric), set(marked)
    head = tag("thead", tag("tr", *(tag("th", h, class_="num" if i in right else None) for i, h in enumerate(header))))
    body = tag("tbody", *(tag("tr", *(tag("td", c, class_="num" if i in right else None) for i, c in enumerate(row)),
                              class_="marked" if r in strong else None) for r, row in enumerate(rows)))
    made = tag("table", head, body, class_=class_, **attrs)
    return Html(tag("p", caption, class_="caption") + made) if caption else made


def pairs(rows: Iterable[tuple[Any, Any]], class_: str = "pairs") -> Html:
    """A two-column table of names and values (a run's summary)."""
    return tag("table", tag("tbody", *(tag("tr", tag("th", k, scope="row"), tag("td", v)) for k, v in rows)),
               class_=class_)


def section(title: str, *content: Any, id_: str | None = None, level: int = 2) -> Html:
    return tag("section", tag(f"h{level}", title), *content, id=id_)


def details(summary: Any, *content: Any) -> Html:
    """Folded content (a figure's numbers, the whole config): open it to read; printed pages show the summary."""
    return tag("details", tag("summary", summary), *content)


def command_block(line: str) -> Html:
    return tag("pre", tag("code", line), class_="command")


STATES = {"finished": "finished", "running": "in progress", "stopped": "stopped", "failed": "stopped",
          "incomplete": "incomplete"}


def banner(state: str, text: Any) -> Html:
    """The page's first line under its title: whether the run is finished, in progress or stopped, and where."""
    return tag("p", tag("strong", STATES.get(state, state)), " · ", text, class_=f"status status-{state}",
               data_state=state)


CSS = """
:root { color-scheme: light; --ink: #1d1d1f; --muted: #5f6368; --line: #d0d4d9; --band: #f3f5f7; --accent: #1f5fbf; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "DejaVu Sans", Arial,
       sans-serif; color: var(--ink); background: #fff; margin: 0 auto; padding: 1.5rem 2rem 3rem; max-width: 72rem; }
h1 { font-size: 1.6rem; margin: 0 0 .3rem; }
h2 { font-size: 1.25rem; margin: 2rem 0 .6rem; padding-bottom: .2rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
p { margin: .4rem 0 .8rem; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace;
            font-size: .86em; }
pre.command { background: var(--band); border: 1px solid var(--line); border-radius: 4px; padding: .6rem .8rem;
              white-space: pre-wrap; word-break: break-all; margin: .3rem 0 .8rem; }
table { border-collapse: collapse; margin: .4rem 0 1rem; font-size: .9rem; }
caption, p.caption { text-align: left; color: var(--muted); font-size: .85rem; margin: .6rem 0 .1rem; }
th, td { border-bottom: 1px solid var(--line); padding: .25rem .6rem; text-align: left; vertical-align: top; }
thead th { border-bottom: 2px solid var(--ink); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.marked td { font-weight: 600; background: var(--band); }
table.pairs th { font-weight: 600; white-space: nowrap; padding-right: 1.2rem; }
table.wide { font-size: .8rem; display: block; max-width: 100%; overflow-x: auto; }
td.heat { text-align: right; font-variant-numeric: tabular-nums; }
td.chosen { outline: 2px solid var(--ink); outline-offset: -2px; font-weight: 600; }
.meta { color: var(--muted); font-size: .9rem; }
.status { padding: .45rem .8rem; border-radius: 4px; border-left: 5px solid; background: var(--band); }
.status-finished { border-color: #2e7d32; }
.status-running { border-color: var(--accent); }
.status-stopped, .status-failed, .status-incomplete { border-color: #c77700; }
.finding { border-left: 4px solid #c77700; padding: .2rem .7rem; background: #fff8ec; }
td code { overflow-wrap: break-word; }
code.nowrap { white-space: nowrap; }
img { max-width: 100%; height: auto; }
.report table { display: block; max-width: 100%; overflow-x: auto; }
figure { margin: .6rem 0 1.2rem; }
figure svg, figure img { max-width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: .85rem; margin-top: .2rem; }
.figures { display: flex; flex-wrap: wrap; gap: .5rem 1.2rem; }
.figures figure { flex: 1 1 20rem; max-width: 34rem; }
details { margin: .3rem 0 1rem; }
summary { cursor: pointer; color: var(--accent); font-size: .9rem; }
nav.toc { font-size: .9rem; color: var(--muted); margin: .4rem 0 1rem; }
nav.toc a { color: var(--accent); text-decoration: none; margin-right: .8rem; }
footer { margin-top: 2.5rem; color: var(--muted); font-size: .8rem; border-top: 1px solid var(--line);
         padding-top: .5rem; }
@media print {
  @page { size: A4; margin: 14mm 12mm; }
  body { font-size: 10pt; max-width: none; padding: 0; }
  h2 { break-after: avoid; }
  figure, table, pre { break-inside: avoid; }
  .figures figure { flex-basis: 45%; }
  summary, nav.toc { display: none; }
  a { color: inherit; text-decoration: none; }
  .status, pre.command, tr.marked td { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
"""


def document(title: str, status: Html, body: Iterable[Any], kind: str, subtitle: Any = "",
             toc: Sequence[tuple[str, str]] = ()) -> str:
    """A whole page: its title, status line, contents and a footer saying what wrote it. `kind` (run, suite,
    reproduction, comparison) is on <body> for tools that read pages."""
    from .. import __version__

    nav = tag("nav", *(tag("a", name, href=f"#{anchor}") for anchor, name in toc), class_="toc") if toc else ""
    head = (f'<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="vitx {esc(__version__)}"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head>")
    main = tag("body", tag("header", tag("h1", title), tag("p", subtitle, class_="meta") if subtitle else "", status,
                           nav),
               tag("main", *body),
               tag("footer", f"Written by vitx {__version__} from the files in this folder; one self-contained page: "
                             "no network, no scripts. Numbers are read from the run's own files."),
               data_kind=kind)
    return f"<!doctype html>\n<html lang=\"en\">{head}{main}</html>\n"


__all__ = ["Html", "banner", "code", "command_block", "data_json", "details", "document", "esc", "join", "number",
           "pairs", "para", "pct", "pm", "section", "table", "tag", "void"]
