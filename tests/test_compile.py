"""--compile: the objectives' training forward is one graph (DINO's: one, then its loss eager), a compiled run has
the eager run's losses, and no objective's run compiles twice."""

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


def test_dinos_backbones_and_heads_are_one_graph_and_its_loss_runs_eager():
    """DINO's forward up to its heads is one graph; the loss, which takes the teacher's temperature as a number
    that changes each step, is left out of it on purpose (`torch.compiler.disable`)."""
    pytest.importorskip("vitx_dino")
    torch.manual_seed(0)
    model = create_objective("dino", create_backbone("vit-nano/4"), 10, out_dim=64, hidden_dim=32,
                             bottleneck_dim=16, local_crops=2)
    model.on_fit_start(0, 10)
    views = [torch.randn(4, 3, 16, 16), torch.randn(4, 3, 16, 16), torch.randn(4, 3, 8, 8), torch.randn(4, 3, 8, 8)]
    explained = torch._dynamo.explain(model)({"views": views})
    assert explained.graph_count == 1 and explained.graph_break_count == 0  # (the loss is called last: nothing
    assert "torch.compiler.disable" in str(explained.break_reasons[0].reason)  # after it to resume)


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


def _every_objective() -> list[str]:
    """Every registered objective (the built-ins and the installed plugins), and DINO's other forwards: its
    student's crops packed (local, and all with iBOT's masking and KoLeo)."""
    from vitx.registry import OBJECTIVES

    names = OBJECTIVES.names()
    return names + (["dino(packed='local')", "dino(packed='all',ibot=0.5,koleo=0.1)"] if "dino" in names else [])


@pytest.mark.parametrize("objective", _every_objective())
def test_a_compiled_run_compiles_once(objective, tmp_path, monkeypatch):
    """After its first step a compiled run never recompiles: an objective whose forward reads a number that
    changes per step (a schedule's value as a Python float) would be traced again at every step, minutes of
    compilation each on a GPU, until dynamo's limit sends it back to eager. dynamo's capture alone (backend
    eager) and its error on any recompilation decide it in seconds."""
    import torch._dynamo

    torch._dynamo.reset()
    monkeypatch.setattr(loop, "COMPILE_BACKEND", "eager")
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    opts = dict(objective=objective, model="vit-nano/4", data="embedded:shapes", batch_size=8, steps=3, warmup_steps=2,
                save_every=3, log_every=1, eval_samples=0, workers=0, log_with="none", curves=False,
                watch_every=0, compile=True, output_dir=str(tmp_path / "run"))
    pretrain(opts)
    assert len(metrics(tmp_path / "run")) == 3
