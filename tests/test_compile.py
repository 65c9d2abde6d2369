"""--compile: the objectives' training forward is one graph, and a compiled run has the eager run's losses."""

import pytest
import torch

from vitx.backbones import create_backbone
from vitx.objectives import create_objective
from vitx.runner import loop, pretrain

from .helpers import metrics

OBJECTIVES = {"supervised": "embedded:shapes", "mpp": "embedded:leaves"}


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_the_training_forward_is_one_graph(objective):
    """No graph breaks (MPP corrupts patch embeddings without a forward hook, and its metrics need no host sync)."""
    torch.manual_seed(0)
    model = create_objective(objective, create_backbone("vit-nano/4"), 10)
    batch = {"image": torch.randn(4, 3, 16, 16), "label": torch.randint(0, 10, (4,))}
    explained = torch._dynamo.explain(model)(batch)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def _losses(run) -> list[float]:
    return [m["loss"] for m in metrics(run)]


@pytest.mark.parametrize("objective,backend", [
    ("supervised", "aot_eager"),  # dynamo's capture and AOT autograd, in seconds; MPP's graph is checked above
    pytest.param("mpp", "aot_eager", marks=pytest.mark.slow),
    *[pytest.param(o, "inductor", marks=pytest.mark.slow) for o in OBJECTIVES],  # generated C++: ~20 s each
    pytest.param("dino", "aot_eager", marks=pytest.mark.slow),  # its loss eager after the compiled part (below)
])
def test_compiled_run_has_the_eager_losses(objective, backend, tmp_path, monkeypatch):
    pytest.importorskip(f"vitx_{objective}") if objective not in OBJECTIVES else None
    monkeypatch.setattr(loop, "COMPILE_BACKEND", backend)
    opts = dict(objective=objective, model="vit-nano/4", data=OBJECTIVES.get(objective, "embedded:leaves"), batch_size=16, steps=4,
                warmup_steps=1, save_every=4, log_every=1, eval_samples=0, workers=0, log_with="none",
                curves=False)
    pretrain({**opts, "output_dir": str(tmp_path / "eager")})
    pretrain({**opts, "output_dir": str(tmp_path / "compiled"), "compile": True})
    eager, compiled = _losses(tmp_path / "eager"), _losses(tmp_path / "compiled")
    assert len(eager) == len(compiled) == 4
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)  # MPP's corruption draws too (fallback_random)
    assert eager[-1] < eager[0]  # the steps really trained


def _installed(spec: str):
    from vitx.registry import OBJECTIVES

    name = spec.split("(")[0]
    return pytest.param(spec, marks=pytest.mark.skipif(name not in OBJECTIVES.names(),
                                                      reason=f"the {name} plugin is not installed"))


@pytest.mark.parametrize("objective", [_installed(o) for o in ("supervised", "mpp", "mae", "simclr", "dino",
                                                               "dino(ibot=0.5,koleo=0.1)")])
def test_a_compiled_run_compiles_once(objective, tmp_path, monkeypatch):
    """After its first step a compiled run never recompiles: an objective whose forward reads a number that
    changes per step (a schedule's value as a Python float) would be traced again at every step, minutes of
    compilation each on a GPU, until dynamo's limit sends it back to eager. dynamo's capture alone (backend
    eager) and its error on any recompilation decide it in seconds."""
    import torch._dynamo

    torch._dynamo.reset()
    monkeypatch.setattr(loop, "COMPILE_BACKEND", "eager")
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    data = "embedded:shapes" if objective == "supervised" else "embedded:leaves"
    opts = dict(objective=objective, model="vit-nano/4", data=data, batch_size=8, steps=3, warmup_steps=2,
                save_every=3, log_every=1, eval_samples=0, workers=0, log_with="none", curves=False,
                watch_every=0, compile=True, output_dir=str(tmp_path / "run"))
    pretrain(opts)
    assert len(metrics(tmp_path / "run")) == 3
