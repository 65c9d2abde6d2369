"""Masked patch prediction against the paper's definition, on hand-built images."""
import pytest
import torch

import vitx
from vitx.data import Preprocess
from vitx.errors import VitxError
from vitx.objectives.mpp import Corruption

from .helpers import metrics


def _mpp(**kw):
    torch.manual_seed(0)
    backbone = vitx.create_backbone("vit-nano/4", img_size=16)  # 4x4 grid of 4px patches
    obj = vitx.create_objective("mpp", backbone, None, **kw)
    obj.configure_preprocess(Preprocess(image_size=16))  # mean = std = 0.5
    return obj


def _normalise(pixels: torch.Tensor) -> torch.Tensor:
    """uint8-valued (B, 3, H, W) → the model's input, exactly as the data pipeline makes it."""
    return (pixels / 255.0 - 0.5) / 0.5


def test_mean_colour_targets_are_exact():
    obj = _mpp()
    img = torch.zeros(1, 3, 16, 16)
    img[0, :, 0:4, 0:4] = torch.tensor([255.0, 0, 0])[:, None, None]  # patch 0: pure red
    img[0, :, 0:4, 4:8] = torch.tensor([0.0, 255, 128])[:, None, None]  # patch 1
    img[0, :, 0:4, 8:12] = torch.tensor([32.0, 31, 224])[:, None, None]  # patch 2: bin edges 32 → 1, 31 → 0
    img[0, 0, 4:8, 0:4] = torch.tensor([[0.0, 64, 0, 64]] * 4)  # patch 4: red mean 32 → 1
    t = obj.targets(_normalise(img))[0]
    assert t[0] == 7 * 64  # (7, 0, 0)
    assert t[1] == 0 * 64 + 7 * 8 + 4  # (0, 7, 4)
    assert t[2] == 1 * 64 + 0 * 8 + 7  # (1, 0, 7)
    assert t[4] == 1 * 64 and t[3] == 0 and t[15] == 0  # black patches → (0, 0, 0)
    assert obj.head.out_features == 512


def test_downsized_targets_are_exact():
    obj = _mpp(target="downsized")
    img = torch.zeros(1, 3, 16, 16)
    img[0, 1, 0, 0] = 255.0  # one pixel of patch 0 → its 1x1 cell (4px patch: cells are single pixels)
    t = obj.targets(_normalise(img))[0]
    assert t.shape == (16, 16) and t[0, 0] == 7 * 8 and (t[0, 1:] == 0).all() and (t[1:] == 0).all()
    assert obj.head.out_features == 16 * 512


def test_corruption_rates_over_many_draws():
    obj = _mpp()
    plan = obj.sample_corruption(20_000, torch.device("cpu"))  # 20k images × 8 corrupted of 16 patches
    assert plan.index.shape == (20_000, 8)  # exactly 50% of each image's patches
    assert all(len(set(row)) == 8 for row in plan.index[:200].tolist())  # distinct patches
    counts = torch.bincount(plan.index.flatten(), minlength=16).float() / 20_000
    assert torch.allclose(counts, torch.full((16,), 0.5), atol=0.01)  # every position corrupted half the time
    split = torch.bincount(plan.mode.flatten(), minlength=3).float() / plan.mode.numel()
    assert torch.allclose(split, torch.tensor([0.8, 0.1, 0.1]), atol=0.01), split


def test_corrupt_rate_option():
    plan = _mpp(corrupt_rate=0.25).sample_corruption(4, torch.device("cpu"))
    assert plan.index.shape == (4, 4)


def test_random_replacement_never_copies_itself_and_modes_apply():
    obj = _mpp()
    b, n = 64, obj.num_patches
    plan = obj.sample_corruption(b, torch.device("cpu"))
    own = torch.arange(b)[:, None] * n + plan.index
    assert not (plan.source == own).any()
    assert plan.source.min() >= 0 and plan.source.max() < b * n
    tokens = torch.randn(b, n, 64)
    out = obj.corrupt(tokens, plan)
    rows = torch.arange(b)[:, None]
    got, m = out[rows, plan.index], plan.mode
    assert torch.equal(got[m == 0], obj.mask_token.detach().expand(int((m == 0).sum()), -1))
    assert torch.equal(got[m == 1], tokens.reshape(b * n, -1)[plan.source][m == 1])
    assert torch.equal(got[m == 2], tokens[rows, plan.index][m == 2])
    untouched = torch.ones(b, n, dtype=torch.bool)
    untouched[rows, plan.index] = False
    assert torch.equal(out[untouched], tokens[untouched])


def test_corruption_acts_before_position_embeddings():
    """A [mask]ed patch's input is mask_token + its position embedding: two masked patches differ by position."""
    obj = _mpp()
    seen = {}
    obj.backbone.blocks[0].register_forward_pre_hook(lambda mod, args: seen.setdefault("x", args[0]))
    plan = Corruption(index=torch.tensor([[0, 5]]), mode=torch.tensor([[0, 0]]), source=torch.tensor([[1, 1]]))
    obj.encode(torch.zeros(1, 3, 16, 16), plan)
    x, pos = seen["x"][0], obj.backbone.pos_embed[0]  # (1 + N, D): [class] token first
    assert torch.allclose(x[1 + 0], obj.mask_token + pos[1 + 0], atol=1e-6)
    assert torch.allclose(x[1 + 5], obj.mask_token + pos[1 + 5], atol=1e-6)


def test_loss_ignores_uncorrupted_patches(monkeypatch):
    obj = _mpp()
    torch.nn.init.normal_(obj.head.weight)  # logits that depend on the input
    images = _normalise(torch.randint(0, 256, (4, 3, 16, 16)).float())
    real = obj.targets(images)

    def loss_with(targets):
        monkeypatch.setattr(obj, "targets", lambda imgs: targets)
        torch.manual_seed(123)  # same corruption plan each time
        return obj({"image": images})["loss"]

    torch.manual_seed(123)
    plan = obj.sample_corruption(4, torch.device("cpu"))
    corrupted = torch.zeros_like(real, dtype=torch.bool)
    corrupted[torch.arange(4)[:, None], plan.index] = True
    base = loss_with(real)
    assert torch.equal(loss_with(torch.where(corrupted, real, (real + 77) % 512)), base)  # others changed
    assert not torch.equal(loss_with(torch.where(corrupted, (real + 77) % 512, real)), base)  # corrupted changed


def test_metrics_and_trivial_baseline():
    obj = _mpp()
    out = obj({"image": _normalise(torch.zeros(8, 3, 16, 16))})  # every patch black → one colour
    assert out["baseline_acc"] == 1.0
    assert torch.isfinite(out["loss"]) and out["loss"] > 0
    assert 0.0 <= out["colour_acc"] <= 1.0


def test_pixel_regression_target():
    obj = _mpp(target="pixels")
    images = torch.randn(2, 3, 16, 16)
    assert obj.targets(images).shape == (2, 16, 48)
    out = obj({"image": images})
    assert set(out) == {"loss"} and out["loss"] > 0


@pytest.mark.parametrize("kw,match", [
    ({"corrupt_rate": 0.0}, "corrupt_rate"),
    ({"mask_rate": 0.5}, "must be 1"),
    ({"target": "colour"}, "target must be one of"),
    ({"depth": 3}, "no option"),
])
def test_bad_options(kw, match):
    with pytest.raises(VitxError, match=match):
        _mpp(**kw)


def test_mpp_learns_above_the_trivial_baseline(mpp_run):
    """The CPU MPP recipe, shortened (the session's `mpp_run`): colour accuracy climbs past the trivial
    most-frequent-colour baseline."""
    log = [m for m in metrics(mpp_run) if "loss" in m]  # (step 0 holds only the monitor's starting point)
    assert [m["step"] for m in log] == [10, 20, 30, 40, 50, 60]
    assert log[-1]["colour_acc"] > log[0]["colour_acc"] + 0.05  # measured on the digits: 0.333 → 0.443
    # the last 20 steps (about 40,000 corrupted patches; most are black background, which the trivial baseline
    # always guesses): measured 0.443 against 0.402 (standard error ~0.0025)
    late = {k: (log[-1][k] + log[-2][k]) / 2 for k in ("colour_acc", "baseline_acc")}
    assert late["colour_acc"] > late["baseline_acc"] + 0.02, late
    assert log[-1]["loss"] < log[0]["loss"] - 2.0, log  # measured 4.36 → 1.51


def test_the_monitor_reads_the_features_as_the_run_trains(mpp_run):
    """The CPU MPP recipe monitors few-shot and kNN accuracy on digits (real handwriting, 10 classes) at the
    start, every 30 steps and at the end, in metrics.jsonl, from the mean patch token (`monitor_features =
    "patch-mean"`): the last figures equal a fresh Monitor's on the saved backbone read that way, and differ from
    its [class] token's. (The full recipe's curve: 10-shot 36.7% → 43.3%, kNN 56.7% → 65.8%.)"""
    from vitx.evaluation.monitor import Monitor
    from vitx.evaluation.representation import Representation

    seen = [m for m in metrics(mpp_run) if "monitor_knn" in m]
    assert [m["step"] for m in seen] == [0, 30, 60]
    for m in seen:
        assert set(m) >= {"monitor_fewshot_1shot", "monitor_fewshot_10shot", "monitor_knn"}
        assert 0.15 < m["monitor_fewshot_10shot"] <= 1.0 and 0.15 < m["monitor_knn"] <= 1.0  # chance: 0.10
        assert m["monitor_fewshot_1shot"] < m["monitor_fewshot_10shot"]  # more shots, better heads
    monitor, backbone = Monitor("embedded:digits", 32), vitx.load_backbone(mpp_run)
    again = monitor(Representation(backbone, None, patch_mean=True), torch.device("cpu"))
    assert again == pytest.approx({k: seen[-1][k] for k in again}, abs=1e-6)
    cls_token = monitor(Representation(backbone, None), torch.device("cpu"))
    assert cls_token["monitor_knn"] != pytest.approx(again["monitor_knn"], abs=1e-6)
    from vitx.evaluation.monitor import Monitors, dataset_tag

    several = Monitors("embedded:digits,embedded:shapes(length=300)", 32)  # --monitor a,b: the first keeps its keys
    both = several(Representation(backbone, None, patch_mean=True), torch.device("cpu"))
    assert {k: both[k] for k in again} == pytest.approx(again, abs=1e-6)
    assert set(both) - set(again) == {k.replace("monitor_", "monitor_shapes_") for k in again}
    assert [dataset_tag(s, {"cifar10"}) for s in ("hf:o/cifar10", "~/data/My Photos/", "embedded:x(a=1)")] == [
        "cifar102", "my_photos", "x"]


def test_monitor_feature_choices_are_the_few_shot_evaluations():
    """The config's choices (kept torch-free for the CLI) are the few-shot evaluation's."""
    from vitx.runner.config import CHOICES
    from vitx.evaluation.representation import FEATURES

    assert CHOICES["monitor_features"] == ("auto", *FEATURES)


def test_a_transfer_from_mpp_reads_the_patch_tokens_it_trained(mpp_run, tmp_path):
    """--features auto from an MPP start: the head reads the mean patch token (timm's avg pooling, the final norm
    kept), recorded so the saved classifier is rebuilt alike; --features cls-token keeps the [class] token."""
    import json

    import torch

    from vitx.runs.start import load_start
    from vitx.runs.trained import load_classifier, resolve_run
    from vitx.transfer import TransferConfig, transfer

    for features, pool in (("auto", "avg"), ("cls-token", "token")):
        out = tmp_path / features
        transfer(TransferConfig(start=str(mpp_run), features=features, sweep=False, lr=0.01, steps=2, shots=20,
                                batch_size=8, test_samples=16, workers=0, curves=False, output_dir=str(out)))
        final = out / "vtab-dsprites_loc" / "final"
        record = json.loads((final / "config.json").read_text())["backbone"]
        assert record["overrides"].get("global_pool", "token") == pool
        backbone = load_start(str(final))
        assert backbone.global_pool == pool
        if pool == "avg":
            x = torch.randn(2, 3, 32, 32)
            with torch.no_grad():
                torch.testing.assert_close(backbone.eval()(x), backbone.forward_features(x)[:, 1:].mean(1))
            assert load_classifier(resolve_run(out)).backbone.global_pool == "avg"
