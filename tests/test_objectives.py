import pytest
import torch
import torch.nn.functional as F

import vitx
from vitx.errors import VitxError


def _objective(**kw):
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-nano/4")
    return vitx.create_objective("supervised", backbone, 5, **kw)


def _batch(labels):
    return {"image": torch.randn(len(labels), 3, 16, 16, generator=torch.Generator().manual_seed(1)),
            "label": torch.tensor(labels)}


def test_softmax_cross_entropy_and_top1():
    obj = _objective(head="linear")
    torch.nn.init.normal_(obj.head.weight)
    batch = _batch([0, 1, 2, 3])
    out = obj(batch)
    logits = obj.head(obj.backbone(batch["image"]))
    assert torch.allclose(out["loss"], F.cross_entropy(logits, batch["label"]))
    assert out["top1"] == (logits.argmax(-1) == batch["label"]).float().mean()


def test_label_smoothing():
    obj = _objective(head="linear", label_smoothing=0.1)
    torch.nn.init.normal_(obj.head.weight)
    batch = _batch([0, 4])
    logits = obj.head(obj.backbone(batch["image"]))
    assert torch.allclose(obj(batch)["loss"], F.cross_entropy(logits, batch["label"], label_smoothing=0.1))


def test_zero_init_heads_start_at_chance():
    out = _objective(head="mlp")(_batch([0, 1, 2]))
    assert torch.allclose(out["loss"], torch.tensor(5.0).log())  # all logits 0: loss = log K


def test_multilabel_sigmoid():
    obj = _objective(head="linear", multilabel=True)
    torch.nn.init.normal_(obj.head.weight)
    labels = [[1, 0, 0, 1, 0], [0, 1, 0, 0, 0]]
    batch = _batch(labels)
    logits = obj.head(obj.backbone(batch["image"]))
    expected = F.binary_cross_entropy_with_logits(logits, batch["label"].float())
    assert torch.allclose(obj(batch)["loss"], expected)


def test_errors():
    backbone = vitx.create_backbone("vit-nano/4")
    with pytest.raises(VitxError, match="needs labelled data"):
        vitx.create_objective("supervised", backbone, None)
    with pytest.raises(VitxError, match="no option"):
        vitx.create_objective("supervised", backbone, 3, colour=1)
    with pytest.raises(VitxError, match="unknown objective 'supervize'; did you mean supervised"):
        vitx.create_objective("supervize", backbone, 3)
