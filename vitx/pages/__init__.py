"""One self-contained HTML page per run, transfer and reproduction (`report.html`), and one comparing several
(`vitx report A B ...`). A page is a single file: figures inline as SVG, images as data: URLs, its own CSS, no
script and no request of any kind, so it can be mailed, attached or put on a static site from a cluster without
internet. Numbers are read from the folder's own files (config.json, metrics.jsonl, result.json,
summary.json, results.json), never recomputed another way.

    run.py           a pre-training run (or a transfer's final run)
    suite.py         a transfer: one task or a suite, with the published rows beside it
    reproduction.py  `vitx reproduce`'s output (its REPORT.md, figures inline)
    compare.py       several runs or transfers side by side
    html.py, svg.py  the markup, and figures inside it; records.py: what a page reads from a folder

Importing this package is cheap; matplotlib loads at the first figure.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from ..console import say
from ..errors import VitxError
from .records import REPORT

KINDS = ("run", "suite", "reproduction")


def kind_of(path: Path) -> str:
    """What the folder holds: a pre-training run (config.json with a run record, or a run's metrics.jsonl before
    its first checkpoint), a transfer (suite.json, summary.json, transfer.json or task folders), or a
    reproduction (results.json with its claims). One line when it is none of them."""
    from ..safe_io import read_json_object

    if not path.exists():
        raise VitxError(f"{path}: no such folder; give a pre-training run, a transfer's --output-dir or a "
                        "reproduction's output folder")
    if not path.is_dir():
        raise VitxError(f"{path} is a file; give the folder of a run, a transfer or a reproduction")
    results = read_json_object(path / "results.json")
    plan = read_json_object(path / "plan.json") or {}
    if results is not None and {"claims", "plan"} <= results.keys() or "pretrainings" in plan:
        return "reproduction"  # (plan.json alone: one under way, which its page says)
    try:
        tasks = any((p / "transfer.json").is_file() for p in path.iterdir() if p.is_dir())
    except OSError as exc:
        raise VitxError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if tasks or any((path / name).is_file() for name in ("suite.json", "summary.json", "transfer.json")):
        return "suite"
    if (path / "config.json").is_file() or (path / "metrics.jsonl").is_file():
        return "run"
    raise VitxError(f"{path} is not a vitx run, transfer or reproduction (no config.json, metrics.jsonl, "
                    "suite.json, summary.json or results.json)")


def page(paths: Sequence[Path], figures: bool = True) -> tuple[str, str]:
    """(kind, HTML) of the page for `paths`: one folder's page, or a comparison of several."""
    if not paths:
        raise VitxError("name at least one folder: a run, a transfer or a reproduction")
    if len(paths) > 1:
        from .compare import compare_page

        return "comparison", compare_page(list(paths), [kind_of(p) for p in paths])
    path = paths[0]
    kind = kind_of(path)
    if kind == "run":
        from .run import run_page

        return kind, run_page(path, figures)
    if kind == "suite":
        from .suite import suite_page

        return kind, suite_page(path, figures)
    from .reproduction import reproduction_page

    return kind, reproduction_page(path)


GENERATOR = '<meta name="generator" content="vitx '  # what every page vitx writes has in its head (html.py)


def is_page(path: Path) -> bool:
    """Whether the file at `path` is a page vitx wrote (its generator tag, in its head)."""
    try:
        with open(path, "rb") as stream:
            return GENERATOR.encode() in stream.read(4096)
    except OSError:
        return False


def replaceable(target: Path, named: str, force: bool, folders: list[Path]) -> None:
    """Refuse to write a page over a file that is not one of vitx's pages (a user's own file) unless `force`,
    and over a run's own files (its weights, its records) even then: a page vitx wrote before is what rerunning
    `vitx report` replaces (settings/paths.py: the rule every output file follows). A page is HTML, and a run's
    own report.html is the page of that run alone (`folders`: what the page shows)."""
    from ..runs.ownership import is_vitx_folder
    from ..settings.paths import writable_file

    writable_file(target, named, force, example="report.html", ours=is_page, what="a vitx page")
    if target.suffix.lower() not in (".html", ".htm"):
        raise VitxError(f"{named} {target}: a page is HTML; give a name ending in .html")
    if target.name == "report.html" and is_vitx_folder(target.parent) and \
            [f.resolve() for f in folders] != [target.parent.resolve()]:
        raise VitxError(f"{named} {target} is the page of the run in {target.parent}; write this page elsewhere "
                        "(-o comparison.html)")


def write(html: str, output: Path) -> Path:
    """The page to `output`, atomically (a reader never sees half of it)."""
    from ..safe_io import atomic_write_text
    from ..errors import cannot_write

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(output, html)
    except OSError as exc:
        raise cannot_write(output, exc) from None
    return output


def write_own_page(folder: str | Path, kind: str, figures: bool, warn: Callable[[str], None],
                   given: tuple[str, str] | None = None) -> Path | None:
    """A run's or a transfer's report.html, written by the run itself at its end or stop. A failure is one
    warning line, never a lost run; an interrupt (Ctrl-C, a second signal) goes through."""
    from .records import held_by_another

    folder = Path(folder)
    try:
        if (folder / REPORT).is_file() and not is_page(folder / REPORT):  # a user's own file of that name stays
            warn(f"warning: {folder / REPORT} not written: a file of that name is there and is not a vitx page")
            return None
        if kind == "run" and held_by_another(folder):
            return None  # another process writes this run now: its page is that process's to write
        if kind == "run" and not (folder / "config.json").is_file() and not _logged(folder):
            return None  # stopped before its first log line or checkpoint: nothing to show (its error says why)
        if kind == "run":
            from .run import run_page

            html = run_page(folder, figures, given)
        else:
            from .suite import suite_page

            html = suite_page(folder, figures)
        return write(html, folder / REPORT)
    except Exception as exc:  # noqa: BLE001 - any failure (a damaged file, a full disk, a bug) is said, not raised
        warn(f"warning: {folder / REPORT} not written ({type(exc).__name__}: {exc})")
        return None


def _logged(folder: Path) -> bool:
    """Whether the run's metrics.jsonl holds a record yet."""
    from ..plots.series import read_metrics

    return (folder / "metrics.jsonl").is_file() and bool(read_metrics(folder))


def write_run_page(cfg: Any, console: Any, stopped: BaseException | None = None) -> None:
    """A pre-training's report.html, beside curves.png, at its end or stop (main process; `vitx pretrain` hands
    this to the runner as its `page`): with its figures at the end (--curves), without them at a stop (a stopped
    job has seconds; `vitx report` draws them). A failure is one warning line, never a lost run; the exception
    that stopped the run is raised on by the runner."""
    from ..errors import Collapsed, Interrupted, Preempted

    if stopped is None:
        given = ("finished", "")
    else:
        error = getattr(stopped, "error", stopped)  # a stop acted on at once carries the command's own line
        said = error.user_message() if isinstance(error, VitxError) else \
            "Ctrl-C" if isinstance(error, KeyboardInterrupt) else f"{type(error).__name__}: {error}"
        kind = "stopped" if isinstance(error, (Preempted, Interrupted, Collapsed, KeyboardInterrupt)) else "failed"
        given = (kind, said)
    write_own_page(cfg.output_dir, "run", bool(cfg.curves) and stopped is None,
                   lambda line: say(console, line), given)


def write_transfer_page(cfg: Any, console: Any, stopped: bool = False) -> None:
    """A transfer's report.html in its --output-dir, by the main process (`vitx transfer` hands this to the
    protocol as its `page`): with each task's sweep figure at the end (--curves), without figures at a stop
    (`vitx report` draws them). A failure is a warning."""
    from ..runner.launch import is_main_process

    if is_main_process():
        write_own_page(cfg.output_dir, "suite", cfg.curves and not stopped,
                       lambda line: say(console, line))


__all__ = ["KINDS", "REPORT", "kind_of", "page", "write", "write_own_page", "write_run_page", "write_transfer_page"]
