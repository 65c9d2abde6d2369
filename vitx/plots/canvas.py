"""The figure plumbing shared by every training figure: matplotlib imported at the first figure only, the Agg
renderer (no display, and no change to the user's pyplot backend: `Figure` objects, no pyplot), small text,
and an atomic write (a temporary file renamed into place, so a reader never sees half a PNG)."""
from __future__ import annotations

import contextlib
import io
import math
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ..errors import VitxError, cannot_write

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

T = TypeVar("T")

STYLE = {"font.size": 7, "axes.titlesize": 8, "axes.labelsize": 7, "legend.fontsize": 6, "xtick.labelsize": 6,
         "ytick.labelsize": 6, "axes.grid": True, "grid.alpha": 0.3, "lines.linewidth": 1.2}
FORMATS = ("png", "pdf", "svg")
PANEL_INCHES = (3.2, 2.3)  # one panel; at 100 dpi a 2×2 figure is about 640×500 pixels
DPI = 100
MARK = "vitx"  # every figure's metadata names it (PNG Software, SVG and PDF Creator): a vitx figure is known by it
_MARKS = (b"Software\x00" + MARK.encode(), b"<dc:title>" + MARK.encode() + b"</dc:title>",
          b"/Creator (" + MARK.encode() + b")")


def is_vitx_figure(path: Path) -> bool:
    """Whether the file at `path` is a figure vitx drew (its metadata's mark, near its start or its end): what a
    command that draws may replace without --force."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(8192)
            stream.seek(max(0, os.fstat(stream.fileno()).st_size - 8192))
            tail = stream.read()
    except OSError:
        return False
    return any(mark in head or mark in tail for mark in _MARKS)


def grid(n: int) -> tuple[int, int]:
    """(rows, columns) for n panels: 2 or 4 as a square-ish grid, otherwise rows of 3."""
    cols = 2 if n in (2, 4) else min(n, 3)
    return math.ceil(n / cols), cols


def new_figure(panels: int, extra_height: float = 0.4) -> tuple["Figure", list["Axes"]]:
    """A figure with `panels` axes in a grid (spare cells hidden); `extra_height` inches for titles/legends."""
    from matplotlib.figure import Figure

    rows, cols = grid(panels)
    fig = Figure(figsize=(PANEL_INCHES[0] * cols, PANEL_INCHES[1] * rows + extra_height), dpi=DPI)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for spare in axes[panels:]:
        spare.set_visible(False)
    return fig, axes[:panels]


def styled(draw: Callable[[], T]) -> T:
    """Run `draw` under the figures' small-text style, leaving the caller's rcParams as they were."""
    import matplotlib

    with matplotlib.rc_context(STYLE):
        return draw()


def figure_format(path: str | Path) -> str:
    """The format a figure path asks for (png without a suffix); a one-line error for one matplotlib is not
    asked to write here."""
    suffix = Path(path).suffix
    fmt = suffix.lower().lstrip(".") or "png"
    if fmt not in FORMATS:
        raise VitxError(f"cannot write a figure as '{suffix}'; use one of {', '.join('.' + f for f in FORMATS)}")
    return fmt


def save(fig: "Figure", path: str | Path, dpi: int = DPI, **options: Any) -> Path:
    """Write `fig` to `path` (format from the suffix: png, pdf or svg) under a temporary name, then rename, with
    vitx's mark in its metadata (`is_vitx_figure`). A device or a pipe the user names (/dev/stdout, /dev/null)
    is written to, never replaced by the rename. `options`: savefig's (bbox_inches, ...)."""
    path = Path(path)
    fmt = figure_format(path)
    options = {"format": fmt, "dpi": dpi, "metadata": {"Software" if fmt == "png" else "Creator": MARK}, **options}
    if path.exists() and not path.is_file() and not path.is_dir():
        drawn = io.BytesIO()  # (matplotlib's writers seek: a pipe cannot)
        fig.savefig(drawn, **options)
        try:
            path.write_bytes(drawn.getvalue())
        except OSError as exc:
            raise cannot_write(path, exc) from None
        return path
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(8)}")  # unique on a shared disk, not a pid
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, **options)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only folder, a file where a folder should be, a full disk
        raise cannot_write(path, exc) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return path


def try_draw(what: str, draw: Callable[..., T], *args: Any, warn: Callable[[str], None], **kwargs: Any) -> T | None:
    """`draw(*args, **kwargs)`, or None and one warning line: a figure is never worth stopping a run for. A stop
    (Ctrl-C, a stop signal: BaseExceptions) is not a failure to draw: it goes on, and stops the run."""
    before = set(sys.modules)
    try:
        return draw(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any failure to draw (a bad value, a full disk, a broken matplotlib)
        forget_partial_imports(before)
        warn(f"warning: {what} not drawn ({type(exc).__name__}: {exc})")
        return None
    except BaseException:
        forget_partial_imports(before)
        raise


def forget_partial_imports(before: set[str]) -> None:
    """Drop the matplotlib modules a failed or interrupted figure imported: an import cut short leaves its
    submodules bound to a half-made `matplotlib`, and every later import of it fails (`module 'matplotlib' has
    no attribute 'get_data_path'`); dropped, the next figure imports it whole."""
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("matplotlib", "mpl_toolkits"):
            sys.modules.pop(name, None)
