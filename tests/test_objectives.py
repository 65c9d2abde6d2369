import dataclasses

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


def test_options_are_checked_from_their_declaration():
    """SupervisedOptions (objectives/supervised.py): one generated line per unknown name, wrong type or bound."""
    backbone = vitx.create_backbone("vit-nano/4")
    for options, said in [({"colour": 1}, "supervised has no option 'colour'; its options: head, multilabel, "
                                          "label_smoothing, mixup, cutmix, mix_prob, switch_prob"),
                          ({"label_smooting": 0.1}, "supervised has no option 'label_smooting'; did you mean "
                                                    "label_smoothing?"),
                          ({"label_smoothing": 1.0}, "supervised label_smoothing must be in [0, 1), got 1"),
                          ({"label_smoothing": "x"}, "supervised label_smoothing must be a number, got 'x'"),
                          ({"head": "deep"}, "supervised head must be one of mlp, linear, got 'deep'"),
                          ({"mix_prob": 2}, "supervised mix_prob must be in [0, 1], got 2"),
                          ({"multilabel": True, "mixup": 0.8}, "supervised mixup/cutmix is for single-label")]:
        with pytest.raises(VitxError) as caught:
            vitx.create_objective("supervised", backbone, 3, **options)
        assert said in str(caught.value), str(caught.value)
    made = vitx.create_objective("supervised", backbone, 3, label_smoothing=0)  # an integer is a number
    assert made.settings.label_smoothing == 0.0 and isinstance(made.settings.label_smoothing, float)
    assert made.options == {"head": "mlp", "multilabel": False, "label_smoothing": 0.0, "mixup": 0.0, "cutmix": 0.0,
                            "mix_prob": 1.0, "switch_prob": 0.5}


def test_a_plugin_declares_its_options_and_vitx_checks_and_lists_them():
    from dataclasses import dataclass

    from .helpers import vitx_cli

    @dataclass
    class TurnsOptions:
        turns: int = vitx.option(4, "Rotations to tell apart.", choices=(2, 4))
        width: int = vitx.option(64, "Head width.", min=1, max=4096)

    with vitx.temporary():
        @vitx.register_objective("turns-test")
        class Turns(vitx.Objective):
            Options = TurnsOptions

        backbone = vitx.create_backbone("vit-nano/4")
        assert vitx.create_objective("turns-test", backbone, None, width=8).settings == TurnsOptions(4, 8)
        with pytest.raises(VitxError, match=r"^turns-test width must be in \[1, 4096\], got 5000$"):
            vitx.create_objective("turns-test", backbone, None, width=5000)
        listing = vitx_cli("objectives", "turns-test")
        assert listing.returncode == 0
        for cell in ("turns-test(option=value, ...)", "turns", "2, 4", "width", "[1, 4096]", "Head width."):
            assert cell in listing.stdout, cell

        @vitx.register_objective("bare-test")
        class Bare(vitx.Objective):  # declares no options: it takes none, and says so
            Options = vitx.objectives.options.NoOptions

        with pytest.raises(VitxError, match="^bare-test has no options; got depth$"):
            vitx.create_objective("bare-test", backbone, None, depth=3)

        @vitx.register_objective("own-test")
        class Own(vitx.Objective):  # undeclared (Options None): its constructor's keywords, as before
            def __init__(self, backbone, scale=1.0, **options):
                super().__init__(backbone, scale=scale, **options)

        assert vitx.create_objective("own-test", backbone, None, scale=2.0).options == {"scale": 2.0}
        with pytest.raises(TypeError, match="Options must be a dataclass whose fields are vitx.option"):
            vitx.register_objective("broken-test")(type("Broken", (vitx.Objective,), {"Options": dict}))


def test_every_objective_declares_its_options_and_bounds_what_sizes_memory():
    """`vitx objectives --options` lists every option of the built-in and first-party objectives; the options
    that size memory have an upper bound (issue 47: dino(local_crops=100000) once grew the loader to 2.6 GB)."""
    from vitx.registry import OBJECTIVES

    from .helpers import vitx_cli

    sizing = {"dino": ("out_dim", "hidden_dim", "bottleneck_dim", "global_crops", "local_crops", "local_size"),
              "mae": ("decoder_dim", "decoder_depth", "decoder_heads"), "simclr": ("proj_dim",), "mpp": ("bits",)}
    for name in ("supervised", "mpp", "mae", "simclr", "dino"):
        declared = OBJECTIVES.get(name).obj.Options
        fields = {f.name: f for f in dataclasses.fields(declared)}
        assert all(f.metadata["help"] for f in fields.values()), name
        for option in sizing.get(name, ()):
            assert fields[option].metadata["max"] is not None, (name, option)
    listing = vitx_cli("objectives", "--options")
    assert listing.returncode == 0
    for cell in ("dino(option=value, ...)", "local_crops", "[0, 64]", "[1, 262144]", "fitted to the data (65536 for a",
                 "mae(option=value, ...)", "simclr(option=value, ...)", "mpp(option=value, ...)", "(0.1, 2.0)"):
        assert cell in listing.stdout, cell
