"""The page of `vitx reproduce`'s output: its REPORT.md (the claims table, the low-data transfer table, the
compute curves, the inspection figures, the settings) as HTML, every image in it embedded, and the
pre-trainings' curves when their run folders are there. REPORT.md is what `vitx reproduce` wrote from its
results.json, so the page's numbers are the report's, digit for digit: nothing is recomputed here."""
from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from ..safe_io import read_json_object
from ..errors import VitxError
from .html import Html, banner, document, esc, para, section, tag

REPORT_MD = "REPORT.md"


def _markdown(text: str, folder: Path) -> tuple[str, Html]:
    """(the report's title, its body as HTML): CommonMark with tables (markdown-it-py, rich's own parser), raw
    HTML in the Markdown shown as text, images from the folder embedded as data: URLs, anything else that
    would be fetched (an image or link elsewhere) shown as text."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    title = ""
    if len(tokens) > 2 and tokens[0].type == "heading_open" and tokens[0].tag == "h1":
        title = tokens[1].content
        tokens = tokens[3:]  # the page's own <h1> says it

    def image(renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        src, alt = str(token.attrGet("src") or ""), token.content or str(token.attrGet("src") or "")
        path = (folder / src).resolve()
        inside = folder.resolve() in path.parents
        if "://" in src or not inside or not path.is_file() or path.suffix.lower() not in MIME:
            return str(tag("span", f"[figure {src} is not in this folder]", class_="meta"))
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return (f'<img src="data:{MIME[path.suffix.lower()]};base64,{data}" alt="{esc(alt or src)}" '
                f'title="{esc(src)}" data-file="{esc(src)}">')

    def link_open(renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        return '<span class="link">'  # a link elsewhere is not followed from a page that fetches nothing

    def link_close(renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
        href = str(tokens[_opening(tokens, idx)].attrGet("href") or "")
        return f"</span> <span class=\"meta\">({esc(href)})</span>" if href else "</span>"

    md.add_render_rule("image", image)
    md.add_render_rule("link_open", link_open)
    md.add_render_rule("link_close", link_close)
    return title, Html(md.renderer.render(tokens, md.options, {}))


MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml"}


def _opening(tokens: list[Any], idx: int) -> int:
    """The link_open that the link_close at `idx` closes."""
    depth = 0
    for i in range(idx, -1, -1):
        depth += tokens[i].type == "link_close"
        depth -= tokens[i].type == "link_open"
        if depth == 0:
            return i
    return idx


def _pretrainings(folder: Path) -> Html:
    """The pre-trainings' curves overlaid, when their run folders (pretrain-<name>/) are beside the report."""
    from ..plots.series import read_metrics
    from .run import curves_figure

    runs = {p.name[len("pretrain-"):]: read_metrics(p) for p in sorted(folder.glob("pretrain-*"))
            if (p / "metrics.jsonl").is_file()}
    runs = {name: rows for name, rows in runs.items() if rows}
    if not runs:
        return ""
    return section("Pre-training curves", para("Each pre-training's metrics.jsonl (its folder pretrain-<name>/), "
                                               "one colour per pre-training."),
                   curves_figure(runs, "pretrainings", "pre-trainings"), id_="pretrainings")


def reproduction_page(path: Path) -> str:
    """The page of the reproduction in `path` (its REPORT.md and results.json)."""
    results = read_json_object(path / "results.json")
    if results is None:
        raise VitxError(f"{path} has no readable results.json: the reproduction is under way or stopped (its "
                        "runs' own report.html are in their folders; `vitx reproduce` with the same --output-dir "
                        "finishes it)")
    report = path / REPORT_MD
    if not report.is_file():
        raise VitxError(f"{path} has results.json but no {REPORT_MD}; run `vitx reproduce` with the same "
                        "--output-dir again to write it")
    title, body = _markdown(report.read_text(encoding="utf-8"), path)
    claims = results.get("claims") or []
    held = sum(bool(c.get("holds")) for c in claims)
    plan = results.get("plan") or {}
    partial = results.get("partial")  # stopped before its inspection: the claims judged so far
    status = banner("stopped" if partial else "finished",
                    esc(f"{held} of {len(claims)} claims {'judged so far ' if partial else ''}reproduce · plan "
                        f"{plan.get('name', '?')}, {results.get('seconds', 0) / 60:.1f} minutes"
                        + (f" · partial: {partial}" if partial else "")))
    subtitle = f"reproduction · {plan.get('model', '?')} at {plan.get('image_size', '?')}px on {plan.get('data', '?')}"
    return document(title or f"{path.resolve().name}: reproduction", status,
                    [tag("article", body, class_="report", data_source=REPORT_MD), _pretrainings(path)],
                    "reproduction", subtitle)


__all__ = ["reproduction_page"]
