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
])
def test_compiled_run_has_the_eager_losses(objective, backend, tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "COMPILE_BACKEND", backend)
    opts = dict(objective=objective, model="vit-nano/4", data=OBJECTIVES[objective], batch_size=16, steps=4,
                warmup_steps=1, save_every=4, log_every=1, eval_samples=0, workers=0, log_with="none",
                curves=False)
    pretrain({**opts, "output_dir": str(tmp_path / "eager")})
    pretrain({**opts, "output_dir": str(tmp_path / "compiled"), "compile": True})
    eager, compiled = _losses(tmp_path / "eager"), _losses(tmp_path / "compiled")
    assert len(eager) == len(compiled) == 4
    assert compiled == pytest.approx(eager, rel=1e-4, abs=1e-5)  # MPP's corruption draws too (fallback_random)
    assert eager[-1] < eager[0]  # the steps really trained
