"""`vitx bench`: images per second, TFLOP/s, MFU and the input wait of a run's training step on this machine
(vitx/speed/). Its options are the run's (pre-training's settings; any other through --recipe and --set) and the
measurement's (`speed.config.BenchConfig`)."""
from __future__ import annotations

import inspect
from typing import Any, List, Optional

import typer

from ..speed.config import OWN, BenchConfig
from .options import RECIPE, SET, command

DOC = ("Measure a run's training step here: img/s, TFLOP/s, MFU and the input wait, for a model, batch, precision "
       "and objective (any other pre-training setting through --recipe or --set), on synthetic images or your own "
       "--data. E.g. vitx bench --model vit-b/16 --batch-size 256 --precision bf16 --compile.")


def _bench(options: dict[str, Any], resume: bool, recipe: Optional[str], sets: list[str]) -> None:
    from ..errors import VitxError
    from ..recipe import parse_sets, resolve
    from ..runner.config import PretrainConfig

    bench = BenchConfig(**options).validate()
    replaced = sorted(set(parse_sets(sets, PretrainConfig)) & set(OWN))  # the measurement's own, not the run's
    if replaced:
        key = replaced[0]
        raise VitxError(f"--set {key}: vitx bench sets {OWN[key]}; give {OWN[key].split()[0]} instead")
    run = {**resolve(PretrainConfig, "pretrain", recipe, sets, bench.run_settings(options)), "data": bench.data}
    from ..speed.bench import measure, write  # torch, timm, accelerate: seconds, so only here

    measured = measure(run, bench)
    if measured is None:  # another process of a launch: the main one says it
        return
    for line in measured.lines():
        typer.echo(line)
    if bench.output:
        write(measured, bench.output)


def _with_recipe(handler: Any) -> Any:
    """The command with --recipe and --set (a run's other settings), without --resume (nothing is kept)."""
    params = list(inspect.signature(handler).parameters.values())
    params += [inspect.Parameter("recipe", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str], default=RECIPE),
               inspect.Parameter("set_", inspect.Parameter.KEYWORD_ONLY, annotation=List[str], default=SET)]
    handler.__signature__ = inspect.Signature(params)
    handler.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    return handler


bench = _with_recipe(command(BenchConfig, _bench, "bench", DOC, training=False))
