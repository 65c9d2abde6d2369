"""Figures inside a page: vitx's own figures (`vitx.plots`: the same code that draws curves.png, sweep.png and
compute.png) drawn as SVG and inlined, and a run's PNGs embedded as data: URLs. Each figure carries the numbers
it draws as JSON in `data-values`, so a reader's tool (and the browser test) can check them against the run's
files; a table of them is folded under the figure.

Text stays text (`svg.fonttype: none`): small, searchable and printed sharp in the reader's own fonts. Each
figure's element ids are salted with its name, so two figures on one page never share a clip path.
"""
from __future__ import annotations

import base64
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from .html import Html, data_json, tag, void

_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)  # the XML declaration and DOCTYPE: not wanted inside HTML
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)  # creator, date: noise (and a changing date)
_SIZE = re.compile(r'<svg([^>]*?)\swidth="([\d.]+)pt"\s+height="([\d.]+)pt"')


def inline_svg(draw: Callable[[Path], Any], name: str) -> tuple[Html, Any]:
    """Run `draw(path)`, a vitx.plots drawing that writes a figure to `path`, with an .svg path; return the
    <svg> element, scaled to its container (its own size as the most it grows to), and what `draw` returned
    (the panels or lines it drew)."""
    import matplotlib

    with tempfile.TemporaryDirectory(prefix="vitx-page-") as tmp, \
            matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"vitx-{name}"}):
        path = Path(tmp) / f"{name}.svg"
        drawn = draw(path)
        text = path.read_text(encoding="utf-8")
    text = _METADATA.sub("", _PROLOG.sub("", text, count=1), count=1)
    size = _SIZE.search(text)
    if size:  # points → CSS pixels: the figure's natural size, never wider than the page
        width = float(size.group(2)) * 4 / 3
        text = _SIZE.sub(lambda m: f'<svg{m.group(1)} style="max-width:{width:.0f}px" role="img"', text, count=1)
    return Html(text.strip()), drawn


def figure(svg: Html, name: str, title: str, values: Any, caption: Any = "", numbers: Any = "") -> Html:
    """A <figure> of one drawing: its title (for screen readers and the test), its numbers in data-values, a
    caption, and `numbers` (a table of the values) folded beneath."""
    folded = tag("details", tag("summary", "the numbers drawn"), numbers) if numbers else ""
    return tag("figure", svg, tag("figcaption", caption) if caption else "", folded, class_="plot", data_figure=name,
               data_title=title, data_values=data_json(values))


def embedded_png(path: Path, alt: str) -> Html:
    """A PNG of the run's folder as a data: URL (the page needs nothing beside it)."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return void("img", src=f"data:image/png;base64,{data}", alt=alt)


__all__ = ["embedded_png", "figure", "inline_svg"]
