"""A task's result.json from its items' files (its sweep points' point.json, each seed's final.json), and the
suite's summary.json from every task's result: written by whichever process finds them complete, each a
function of the files alone, so that two processes that both do write the same thing."""
from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console

from ..adapters import resolve_adapters
from ..console import say
from ..safe_io import read_json_object
from ..errors import VitxError
from ..tasks import GROUPS
from ..tasks.published import differences, matching, published
from .config import TransferConfig
from .folders import write_json
from .items import FINAL
from .report import print_summary, summarise
from .suite import Suite


def compare_with(cfg: TransferConfig, results: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """Published rows to show beside the results: `--compare` names, else those of the same timm start and
    method. Each with its numbers on the tasks run and its mean over the tasks counted here."""
    method = resolve_adapters(cfg.adapters)[-1]
    rows = [published(n) for n in cfg.compare] or matching(cfg.start, method.name)
    counted = [r["task"] for r in results if r["task"] not in summary["left_out"]]
    shown = {}
    for row in rows:
        values = row.per_task()
        same = [values[t] for t in counted if t in values]
        shown[row.name] = {"start": row.start, "method": row.method, "source": row.source, "printed_mean": row.mean,
                           "setup_source": row.setup_source, "differs": differences(row, cfg, method),
                           "beyond": row.beyond,  # the row's setup against the run's settings
                           "tasks": {r["task"]: values.get(r["task"]) for r in results},
                           "mean_same_tasks": sum(same) / len(same) if same else None,
                           "group_means_same_tasks": {
                               g: sum(v) / len(v) for g in summary["group_means"]
                               if (v := [values[r["task"]] for r in results if r.get("group") == g
                                         and r["task"] in counted and r["task"] in values])}}
    return shown


def _from_finals(suite: Suite, name: str, finals: list[dict[str, Any]]) -> dict[str, Any]:
    """The task's result from its seeds' final.json (mean ± s.d. over seeds) and its sweep."""
    task, first = suite.task(name), finals[0]
    chosen = first["chosen"]
    if any(f["chosen"] != chosen for f in finals):
        raise VitxError(f"{suite.folders[name]}: its final runs were trained with different points "
                        f"({', '.join(str(f['chosen']) for f in finals)}); choose another --output-dir")
    sweep = (suite.points(name) or []) if suite.mode in ("task", "suite") else []
    top1 = [f["test_top1"] for f in finals]
    final_seconds = sum(f["seconds"] for f in finals)
    result = {**first["settings"], "group": task.group, "num_classes": task.num_classes, "sweep": sweep,
              "chosen": chosen, "selection": first["selection"], "final_seconds": final_seconds,
              "test_top1": statistics.fmean(top1), "test_loss": statistics.fmean(f["test_loss"] for f in finals),
              "test_samples": first["test_samples"],
              "seconds": final_seconds + sum(p.get("seconds", 0.0) for p in sweep)}  # the task's training, all runs
    if len(finals) > 1:
        result.update(seeds=[f["seed"] for f in finals], test_top1_per_seed=top1, test_top1_std=statistics.stdev(top1))
    if "ema_test_top1" in first:
        averaged = [f["ema_test_top1"] for f in finals]
        result.update(ema_test_top1=statistics.fmean(averaged), ema_test_top1_per_seed=averaged,
                      **({"ema_test_top1_std": statistics.stdev(averaged)} if len(finals) > 1 else {}))
    return result


class Assembler:
    """Assembles results in this process, and says each task's once: its test line when it is assembled here,
    "already done" when it was on disk before."""

    def __init__(self, suite: Suite, console: Console, main: bool = True) -> None:
        self.suite, self.console, self.main = suite, console, main
        self.said: set[str] = set()

    def say(self, line: str) -> None:
        """A line for people, from the main process only (a launch's others assemble the same, silently)."""
        if self.main:
            say(self.console, line)

    def task_result(self, name: str) -> dict[str, Any] | None:
        """The task's result: read, or assembled and written when all its items are on disk; None before."""
        suite = self.suite
        root = suite.folders[name]
        done = read_json_object(root / "result.json")
        chosen = suite.given or (suite.settle(self.console, self.main) if suite.mode == "suite" else None)
        if done is not None and chosen is not None and \
                done.get("chosen") != {"lr": chosen["lr"], "steps": chosen["steps"]}:
            raise VitxError(f"{root} was retrained with {done.get('chosen')}, not the suite's choice lr "
                            f"{chosen['lr']:g} × {chosen['steps']}; choose another --output-dir")
        if done is not None:
            if name not in self.said:
                self.said.add(name)
                self.say(f"{name}: already done ({done['test_top1']:.2%} test top-1); nothing to do")
            return done
        finals = [read_json_object(i.marker) for i in suite.of_task(name, FINAL)]
        if suite.mode == "closed" or not finals or any(f is None for f in finals):
            return None
        result = _from_finals(suite, name, finals)  # type: ignore[arg-type]
        best = result["chosen"]
        if chosen is not None and best != {"lr": chosen["lr"], "steps": chosen["steps"]}:
            raise VitxError(f"{root} was retrained with {best}, not the suite's choice lr {chosen['lr']:g} × "
                            f"{chosen['steps']}; choose another --output-dir")
        if result["sweep"] and suite.cfg.curves and self.main:  # sweep.png: val top-1 per lr × steps, choice ringed
            from ..plots import SWEEP, draw_sweep, try_draw  # (a failure is a warning line)

            try_draw(SWEEP, draw_sweep, result["sweep"], best, root / SWEEP, f"{name}: sweep on train → val",
                     warn=lambda line: say(self.console, line))
        if self.main:
            write_json(root / "result.json", result)
        self.said.add(name)
        # one seed has no spread (its settings still record seeds=[s])
        spread = f" ± {result['test_top1_std']:.2%} over seeds {result['seeds']}" if "test_top1_std" in result else ""
        if "ema_test_top1" in result:
            spread += f" (EMA of the weights: {result['ema_test_top1']:.2%})"
        self.say(f"{name}: test top-1 {result['test_top1']:.2%}{spread} with lr {best['lr']:g} × {best['steps']} "
                 f"steps ({result['selection']} selection, {result['seconds']:.0f} s) → {root}/final")
        return result

    def summary(self) -> dict[str, Any] | None:
        """Every task's result and the group means (summary.json), when every task has its result; None before."""
        suite = self.suite
        results = [self.task_result(t.name) for t in suite.runnable]
        if any(r is None for r in results):
            return None
        summary = summarise(results, len(suite.tasks), suite.skipped,  # type: ignore[arg-type]
                            suite.cfg.allow_synthetic)
        summary["selection"] = suite.settle(self.console, self.main) or \
            {"select": results[0].get("selection") if results else suite.cfg.select}  # type: ignore[union-attr]
        summary["compare"] = compare_with(suite.cfg, results, summary)  # type: ignore[arg-type]
        if self.main:  # (a launch's other processes: neither the file nor a second copy of the table)
            write_json(suite.output / "summary.json", {"tasks": results, **summary, "groups": list(GROUPS)})
            print_summary(results, summary, self.console)  # type: ignore[arg-type]
        return {"tasks": results, **summary}


__all__ = ["Assembler", "compare_with"]
