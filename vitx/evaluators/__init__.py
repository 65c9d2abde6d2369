"""Frozen-feature evaluators, one file each, registered by name (as big_vision's evaluators/ are).

An evaluator declares its settings (a `FrozenConfig` subclass: the options of `vitx eval NAME`), what it
measures on a start's features of one dataset (`evaluate`, run by `frozen.evaluate` for every dataset given),
what it measures on the monitor's features during pre-training (`monitor`: `--monitor-probes NAME`) and how a
result is printed (`table`). A new evaluator is one new file here, or in a plugin (`--plugin file.py`, an entry
point): the command, `--monitor-probes` and the monitor find it in the registry, nothing else changes.

Every file here is imported when the registry is first used, and must import torch only inside its methods:
`vitx eval --help` lists the evaluators without the training stack.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar

from ..evaluation.config import FrozenConfig
from ..registry import EVALUATORS, register_evaluator


class Evaluator:
    """A frozen-feature evaluation, standalone (`vitx eval NAME`) and during training (the --monitor)."""

    config: ClassVar[type] = FrozenConfig  # its settings: `vitx eval NAME`'s options, checked and recorded
    summary: ClassVar[str] = ""  # one line for `vitx eval --help`
    name: str = "evaluator"  # set by the registry's name when it is built (`create_evaluator`)

    def __init__(self, cfg: FrozenConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.config()

    def reader(self, frozen: Any) -> Any:
        """What it reads of the start: a module (B, 3, S, S) → (B, D) with a `kind` (the features' name). Default:
        the --features the config names (auto: what the start's objective trains)."""
        from ..runs.start import representation

        return representation(frozen.backbone, self.cfg.start, getattr(self.cfg, "features", "auto"),
                              self.cfg.use_ema)

    def check(self, frozen: Any, item: str, train: Any, test: Any) -> None:
        """Refuse, in one line, a dataset `item` this evaluation cannot run on (too few images of a class for its
        shots, a --train-samples draw that leaves a class out): called for every dataset before the first is
        evaluated. Default: the draw of --train-samples where the config has one."""
        samples = getattr(self.cfg, "train_samples", 0)
        if samples:
            frozen.train_draw(train, samples)

    def evaluate(self, frozen: Any, model: Any, train: Any, test: Any, preprocess: Any) -> dict[str, Any]:
        """One dataset's result (JSON-ready). `frozen` is the driver (`frozen.Frozen`): its `features(model,
        train, test, preprocess, n)` gives (x_train (N, D), y_train, x_test (M, D), y_test) as numpy arrays."""
        raise NotImplementedError

    def monitor(self, x_train: Any, y_train: Any, x_test: Any, y_test: Any, num_classes: int,
                device: Any) -> dict[str, float]:
        """Figures during training, from the monitor's features (numpy, (N, D) and (M, D)): keys without the
        `monitor_` prefix the monitor adds. Cheap: it runs at every checkpoint."""
        from ..errors import VitxError

        raise VitxError(f"evaluator {self.name} does not run during training; drop it from --monitor-probes")

    def table(self, result: dict[str, Any], console: Any) -> None:
        """Print one dataset's result for people."""
        console.print_json(data=result)

    @staticmethod
    def titled(title: str, console: Any) -> Any:
        """A rich table whose title (paths, data names: escaped, never read as markup) keeps its line: at least as
        wide as the title when the console allows, so a table of one narrow column does not wrap it letter by
        letter (as the console's width allows when piped: rich's 80 columns, or $COLUMNS)."""
        from rich.cells import cell_len
        from rich.markup import escape
        from rich.table import Table

        return Table(title=escape(title), min_width=min(cell_len(title), console.width))


def create_evaluator(name: str, cfg: FrozenConfig | None = None) -> Evaluator:
    """The evaluator registered as `name` (one line, with close names, for an unknown one), with `cfg`."""
    cls = EVALUATORS.get(name).obj
    evaluator = cls(cfg)
    evaluator.name = name
    return evaluator


__all__ = ["Evaluator", "create_evaluator", "register_evaluator"]

for _module in pkgutil.iter_modules(__path__):  # the built-in evaluators: every file in this folder
    importlib.import_module(f"{__name__}.{_module.name}")
