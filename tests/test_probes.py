"""Frozen-feature probes beyond the few-shot head: the readouts a linear probe picks from (one forward pass), the
linear probe on cached features (heads trained side by side, chosen on validation), and `vitx eval linear` /
`vitx eval knn` on several datasets in one call."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from .helpers import vitx_cli


def test_readouts_are_the_features_each_choice_reads():
    """Every choice of one forward pass equals what `read_as` reads alone; last4's final block is the [class]
    token; cls-token+patch-mean is the two side by side (no copy). A former name reads as the current one."""
    from vitx.backbones import create_backbone
    from vitx.evaluation.representation import Readouts, read_as, tanh_layer

    torch.manual_seed(0)
    backbone = create_backbone("vit-nano/4").eval()
    layer = tanh_layer(torch.randn(32, 64), torch.randn(32))
    readouts = Readouts(backbone, layer)
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        out = readouts(x)  # (3, 32 + 64 + 64 + 4·64)
        assert out.shape == (3, 32 + 64 + 64 + 256)
        for name in ("pre-logits", "cls-token", "patch-mean"):
            torch.testing.assert_close(out[:, readouts.slices[name]], read_as(backbone, name, layer)(x))
        torch.testing.assert_close(out[:, readouts.slices["last4"]][:, -64:], out[:, readouts.slices["cls-token"]])
        both = out[:, readouts.slices["cls-token+patch-mean"]]
        torch.testing.assert_close(both, torch.cat([read_as(backbone, "cls-token")(x), read_as(backbone, "patch-mean")(x)], 1))
        # "backbone", cls-token's former name, as a plugin's objective may still declare it
        torch.testing.assert_close(read_as(backbone, "backbone", layer)(x), out[:, readouts.slices["cls-token"]])
    assert not readouts.training  # made from an eval-mode backbone, it stays so
    assert "last4" not in Readouts(create_backbone("vit-nano/4", depth=1)).slices  # one block: no last-n


def test_heads_trained_side_by_side_are_each_their_own():
    """The grid's heads share batches and nothing else: the lr-0.1 head of a two-lr fit is the lone lr-0.1 fit,
    to the bit; a fit is the same twice; torch's global generator is not touched (the monitor probes mid-run)."""
    from vitx.evaluation.sgd_probe import fit_heads

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 8)).astype(np.float32), rng.integers(0, 3, 300)
    before = torch.get_rng_state()
    pair = fit_heads(x, y, 3, [0.1, 1.0], epochs=3, batch=64)
    assert torch.equal(torch.get_rng_state(), before)  # a monitor's probe leaves the run's random stream alone
    alone = fit_heads(x, y, 3, [0.1], epochs=3, batch=64)
    again = fit_heads(x, y, 3, [0.1, 1.0], epochs=3, batch=64)
    assert torch.equal(pair.heads[0].weight, alone.heads[0].weight)
    assert torch.equal(pair.heads[1].weight, again.heads[1].weight)
    assert not torch.equal(pair.heads[0].weight, pair.heads[1].weight)


def test_linear_probe_picks_the_informative_features_on_validation():
    """Two feature choices, one pure noise and one that holds the class: the probe chooses the second on the
    held-out part of train and scores far above chance on test; the grid is every lr × choice."""
    from vitx.evaluation.sgd_probe import linear_probe

    rng = np.random.default_rng(1)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 4, n)
        signal = np.eye(4)[y] * 3 + rng.normal(size=(n, 4))  # (n, 4): class means apart by 3σ
        return np.concatenate([rng.normal(size=(n, 6)), signal], 1).astype(np.float32), y  # (n, 10)

    (x, y), (xt, yt) = split(400), split(200)
    result = linear_probe(x, y, xt, yt, 4, {"noise": slice(0, 6), "signal": slice(6, 10)}, ["noise", "signal"],
                          lrs=[0.01, 0.1], epochs=20, batch=64, seeds=[0, 1])
    assert result["features_chosen"] == "signal"
    assert set(result["grid"]) == {"noise", "signal"} and list(result["grid"]["noise"]) == ["0.01", "0.1"]
    assert max(result["grid"]["noise"].values()) < 0.45 < result["val_top1"]  # chance 0.25
    assert result["test_top1"] > 0.85 and len(result["test_top1_per_seed"]) == 2
    assert result["train_samples"] + result["val_samples"] == 400 and result["val_samples"] == 80
    assert result["feature_dim"] == 4


def test_eval_linear_and_knn_on_two_datasets_in_one_call(tmp_path, mpp_run):
    """From the MPP run: `eval linear` picks among every readout on digits and shapes and writes one result each;
    `eval knn --features auto` reads what MPP trains (the mean patch token) and reports each k."""
    out = tmp_path / "linear.json"
    data = "embedded:digits,embedded:shapes(length=300)"
    proc = vitx_cli("eval", "linear", "--from", str(mpp_run), "--data", data, "--train-samples", "300",
                    "--test-samples", "100", "--epochs", "10", "--lrs", "0.1,1", "--seeds", "0,1", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())["datasets"]
    assert [r["data"] for r in results] == data.split(",")
    for r in results:
        assert set(r["grid"]) == {"cls-token", "patch-mean", "cls-token+patch-mean", "last4"}  # MPP: no tanh layer
        assert r["features"] == r["features_chosen"] and r["lr_chosen"] in (0.1, 1.0)
        assert r["train_samples"] + r["val_samples"] == 300 and r["test_samples"] == 100
        assert 0 <= r["test_top1"] <= 1 and len(r["test_top1_per_seed"]) == 2
    # digits above chance (0.10: 0.125 on the 100 drawn); MPP's 60 steps on digits teach shapes nothing (0.095)
    assert results[0]["test_top1"] > 0.1, [r["test_top1"] for r in results]
    assert proc.stdout.count("linear probe:") == 2 and "* chosen" in proc.stdout

    out = tmp_path / "knn.json"
    proc = vitx_cli("eval", "knn", "--from", str(mpp_run), "--data", data, "--k", "5,20,1000",
                    "--test-samples", "100", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())["datasets"]
    assert [list(r["top1"]) for r in results] == [["5", "20", "1000"], ["5", "20", "300"]]  # k used: at most train
    assert results[1]["k_capped"] == {"1000": 300} and "k_capped" not in results[0]
    assert all(r["features"].startswith("patch-mean") and r["temperature"] == 0.07 for r in results)
    assert results[0]["top1"]["5"] > 0.3  # digits, chance 0.10
    assert proc.stdout.count("weighted kNN") == 2


@pytest.mark.parametrize("command,args,needle", [
    ("linear", ["--features", "logits"], "--features must be one of all, auto, pre-logits, cls-token, patch-mean, "
                                         "cls-token+patch-mean, last4, got 'logits'"),
    ("linear", ["--features", "pre-logits"], "--features pre-logits is not available for this start (it has "
                                             "cls-token, patch-mean, cls-token+patch-mean, last4)"),
    ("linear", ["--lrs", "0"], "--lrs must be positive, got 0"),
    ("linear", ["--lrs", "a"], "--lrs takes comma-separated numbers, e.g. --lrs 0.001,0.003,0.01,0.03,0.1,0.3,1.0; "
                               "got 'a'"),
    ("linear", ["--epochs", "0"], "--epochs must be positive, got 0"),
    ("linear", ["--batch-size", "1"], "--batch-size must be above 1, got 1"),
    ("linear", ["--val-fraction", "1"], "--val-fraction must be in (0, 1), got 1"),
    ("linear", ["--seeds", "-1"], "--seeds must not be negative, got -1"),
    ("linear", ["--seeds", "0,0"], "--seeds takes distinct values, e.g. 0,1,2; got 0 twice in 0,0"),
    ("knn", ["--train-samples", "5"], "--train-samples 5 leaves 5 of the 10 classes of the train split without an "
                                      "image: pass --train-samples 10 or more (or 0: all)"),
    ("knn", ["--k", "0"], "--k are neighbour counts and must be positive, got 0"),
    ("knn", ["--temperature", "0"], "--temperature must be positive, got 0"),
    ("knn", ["--train-samples", "-1"], "--train-samples must not be negative, got -1"),
    ("knn", ["--features", "last4"], "--features must be one of auto, pre-logits, cls-token, patch-mean, got 'last4'"),
])
def test_probe_options_are_checked_in_one_line(command, args, needle, tmp_path):
    result = vitx_cli("eval", command, "--from", "scratch", "--model", "vit-nano/4", "--test-samples", "20",
                      "--output", str(tmp_path / "out.json"), *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == f"error: {needle}"
    assert not (tmp_path / "out.json").exists()


def test_repeated_seeds_are_refused_alike_by_eval_linear_and_transfer(tmp_path):
    """`eval linear --seeds 0,0` reported "± 0.00% over seeds 0,0" (one run counted twice) where `transfer
    --seeds 0,0` was refused: one declared rule (`setting(distinct=True)`) now refuses both, in the same words."""
    lines = [vitx_cli(*args, "--from", "scratch", "--model", "vit-nano/4", "--seeds", "3,1,3").stderr.strip()
             for args in (["eval", "linear"], ["transfer", "--output-dir", str(tmp_path / "out")])]
    assert lines == ["error: --seeds takes distinct values, e.g. 0,1,2; got 3 twice in 3,1,3"] * 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["fewshot", "knn", "linear"])
def test_an_output_that_is_a_folder_is_refused_before_any_work(command, tmp_path, monkeypatch):
    """`--output DIR` with DIR an existing folder was an IsADirectoryError after the whole evaluation; a file in
    place of one of its folders, a NotADirectoryError; an existing file was replaced without a word. Each is one
    line, before the start is even read (`--force` replaces a file, as export's does)."""
    from vitx.evaluation.config import FrozenConfig
    import vitx.evaluators.frozen as frozen

    monkeypatch.setattr(frozen, "Frozen", None)  # any work at all would fail loudly
    (tmp_path / "notes.txt").write_text("mine")
    for output, line in ((tmp_path, f"--output {tmp_path} is a folder; give a file to write, e.g. --output "
                                     f"{tmp_path / 'results.json'}"),
                         (tmp_path / "notes.txt" / "r.json", f"--output {tmp_path / 'notes.txt' / 'r.json'}: "
                                                             f"{tmp_path / 'notes.txt'} is a file, not a folder"),
                         (tmp_path / "notes.txt", f"--output {tmp_path / 'notes.txt'} exists; give a new file, or "
                                                  "--force to replace it")):
        result = vitx_cli("eval", command, "--from", "scratch", "--model", "vit-nano/4", "--output", str(output))
        assert (result.returncode, result.stderr.strip()) == (2, f"error: {line}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing written beside it
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert FrozenConfig(output=str(tmp_path / "notes.txt"), force=True).validate().force  # replaced when asked
    result = vitx_cli("eval", command, "--from", "scratch", "--model", "vit-nano/4", "--force")
    assert (result.returncode, result.stderr.strip()) == (2, "error: --force replaces an existing --output file; "
                                                             "give --output FILE, or drop --force")


def test_knn_labels_the_k_that_voted(tmp_path):
    """`--k 100000` on 300 train images: the vote uses all 300, so the table and JSON say k = 300 (and which --k
    were capped), with the same top-1 as asking for k = 300 itself; k below the train images are as asked."""
    data = "embedded:shapes(length=300)"
    common = ("eval", "knn", "--from", "scratch", "--model", "vit-nano/4", "--data", data, "--test-samples", "60")
    result = vitx_cli(*common, "--k", "20,1000,100000", "--output", str(tmp_path / "big.json"))
    assert result.returncode == 0, result.stderr[-2000:]
    big = json.loads((tmp_path / "big.json").read_text())
    assert list(big["top1"]) == ["20", "300"] and big["train_samples"] == 300
    assert big["k_requested"] == [20, 1000, 100000] and big["k_capped"] == {"1000": 300, "100000": 300}
    assert "k = 300" in result.stdout and "k = 100000" not in result.stdout and "k = 1000 " not in result.stdout
    assert "--k 1000, 100000: more than the 300 train images, so k = 300 (every train image votes)" in result.stdout
    exact = vitx_cli(*common, "--k", "20,300", "--output", str(tmp_path / "exact.json"))
    assert exact.returncode == 0, exact.stderr[-2000:]
    assert json.loads((tmp_path / "exact.json").read_text())["top1"] == big["top1"]


def test_the_monitor_runs_the_probes_it_is_given(tmp_path):
    """`--monitor-probes knn,linear`: the linear probe's figure is logged beside kNN's, few-shot's is not; and
    the probes leave the run itself as it was (the same weights as a run without a monitor)."""
    from vitx.runner import pretrain

    from .helpers import metrics, tiny

    probed = tiny(tmp_path / "probed", monitor="embedded:digits(length=400, eval_length=100)",
                  monitor_probes=["knn", "linear"], steps=3, save_every=3)
    pretrain(probed)
    rows = [r for r in metrics(tmp_path / "probed" / "run") if "monitor_linear" in r]
    assert rows and all(0.1 < r["monitor_linear"] <= 1 and "monitor_knn" in r for r in rows)
    assert not any("monitor_fewshot_1shot" in r for r in metrics(tmp_path / "probed" / "run"))
    pretrain(tiny(tmp_path / "plain", steps=3, save_every=3))
    from safetensors.torch import load_file

    a, b = (load_file(tmp_path / name / "run" / "model.safetensors") for name in ("probed", "plain"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_probes_on_small_data_and_starts_without_a_class_token():
    """Too few images for a probe is one clear error (not a division by zero); a backbone without a [class]
    token offers no last-n readout; kNN over more test rows than one chunk gives the unchunked answer."""
    from vitx.backbones import create_backbone
    from vitx.errors import VitxError
    from vitx.evaluation.weighted_knn import knn_accuracy
    from vitx.evaluation.sgd_probe import linear_probe
    from vitx.evaluation.representation import Readouts

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 4)).astype(np.float32), np.arange(20) % 10
    with pytest.raises(VitxError, match="needs at least 21 training images for 10 classes"):
        linear_probe(x, y, x, y, 10, {"f": slice(0, 4)}, ["f"], epochs=1)
    ok = linear_probe(x[:8], y[:8] % 2, x, y % 2, 2, {"f": slice(0, 4)}, ["f"], lrs=[0.1, 0.1, 0.01], epochs=2)
    assert list(ok["grid"]["f"]) == ["0.01", "0.1"]  # distinct lrs, ascending
    gap = create_backbone("vit-nano/4", class_token=False, global_pool="avg")
    readouts = Readouts(gap)
    assert "last4" not in readouts.slices and readouts(torch.randn(2, 3, 16, 16)).shape == (2, 128)
    train, test = rng.normal(size=(300, 8)).astype(np.float32), rng.normal(size=(2500, 8)).astype(np.float32)
    labels, truth = rng.integers(0, 3, 300), rng.integers(0, 3, 2500)
    a = torch.nn.functional.normalize(torch.from_numpy(train), dim=1)
    b = torch.nn.functional.normalize(torch.from_numpy(test), dim=1)
    sim, idx = (b @ a.T).topk(20, dim=1)
    votes = torch.zeros(2500, 3).scatter_add_(1, torch.from_numpy(labels)[idx], (sim / 0.07).exp())
    assert knn_accuracy(train, labels, test, truth, 3) == float((votes.argmax(1).numpy() == truth).mean())
    # a small temperature (DINO's exp(sim / T) overflows float32 below T ≈ 0.0113): the vote tends to the nearest
    # neighbour's, never a tie of infinities
    nearest = torch.from_numpy(labels)[idx[:, 0]].numpy()
    for t in (0.011, 0.001, 1e-6):
        assert knn_accuracy(train, labels, test, truth, 3, temperature=t) == pytest.approx(
            float((nearest == truth).mean()), abs=0.002), t


NEAREST_CLASS_MEAN = '''
"""A made-up evaluator in one file: nearest class mean of L2-normalised frozen features."""
from dataclasses import dataclass

from vitx.evaluation.config import FrozenConfig
from vitx.evaluators import Evaluator, register_evaluator
from vitx.settings import EVALUATION, setting


@dataclass
class NcmConfig(FrozenConfig):
    train_samples: int = setting(0, "Train images that make the class means; 0: all.", EVALUATION, min=0)


def accuracy(x_train, y_train, x_test, y_test, num_classes):
    import numpy as np

    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
    means = np.stack([unit(x_train)[y_train == c].mean(0) for c in range(num_classes)])  # (K, D)
    return float(((unit(x_test) @ means.T).argmax(1) == y_test).mean())


@register_evaluator("ncm")
class NearestClassMean(Evaluator):
    config = NcmConfig
    summary = "Nearest class mean of frozen features."

    def evaluate(self, frozen, model, train, test, preprocess):
        x_train, y_train, x_test, y_test = frozen.features(model, train, test, preprocess, self.cfg.train_samples)
        return {"top1": accuracy(x_train, y_train, x_test, y_test, int(train.num_classes)),
                "train_samples": len(y_train), "test_samples": len(y_test)}

    def monitor(self, x_train, y_train, x_test, y_test, num_classes, device):
        return {"ncm": accuracy(x_train, y_train, x_test, y_test, num_classes)}
'''


def test_an_evaluator_in_one_file_is_a_command_and_a_monitor_probe(tmp_path):
    """Evaluators are a kind in the registry: one file (here a plugin's) is `vitx eval NAME` with its own
    options, runs standalone on a start, and runs in the monitor by `--monitor-probes NAME`; no other file
    changes. After the command its registration is gone (the built-ins are unchanged)."""
    from .helpers import as_flags, metrics, tiny

    plugin = tmp_path / "ncm.py"
    plugin.write_text(NEAREST_CLASS_MEAN)
    listed = vitx_cli("--plugin", str(plugin), "eval", "--help").stdout
    assert "ncm" in listed and "Nearest class mean" in listed and "linear" in listed
    assert "--train-samples" in vitx_cli("--plugin", str(plugin), "eval", "ncm", "--help").stdout
    data = "embedded:shapes(length=300, eval_length=90)"
    done = vitx_cli("--plugin", str(plugin), "eval", "ncm", "--from", "scratch", "--model", "vit-nano/4", "--data",
                    data, "--train-samples", "150", "--output", str(tmp_path / "ncm.json"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "ncm.json").read_text())
    assert (result["train_samples"], result["test_samples"], result["data"]) == (150, 90, data)
    assert 0.1 < result["top1"] <= 1  # 10 classes: the shapes' features are better than chance even untrained
    run = tiny(tmp_path, monitor="embedded:digits(length=400, eval_length=100)", steps=3, save_every=3)
    trained = vitx_cli("--plugin", str(plugin), "pretrain", *as_flags(run), "--monitor-probes", "knn,ncm")
    assert trained.returncode == 0, trained.stderr[-2000:]
    rows = [r for r in metrics(tmp_path / "run") if "monitor_ncm" in r]
    assert [r["step"] for r in rows] == [0, 3] and all(0 < r["monitor_ncm"] <= 1 and "monitor_knn" in r for r in rows)
    unknown = vitx_cli("pretrain", *as_flags(tiny(tmp_path / "other")), "--monitor-probes", "knn,ncn")
    assert (unknown.returncode, unknown.stderr.strip()) == (
        2, "error: --monitor-probes: unknown evaluator 'ncn'; did you mean knn?")
    assert "ncm" not in vitx_cli("eval", "--help").stdout  # the plugin's command went with its registration


def test_label_free_figures_tell_spread_from_collapsed_features(tmp_path):
    """RankMe and the spread of the normalised features (evaluators/rankme.py): features spread over 32
    dimensions have an effective rank near 32 and a per-dimension s.d. near 1/√32; features on a plane, rank
    2; features collapsed to one point (up to noise), rank 1 and s.d. near 0. The monitor logs them, labels
    unused."""
    from vitx.evaluation.collapse import label_free

    from .helpers import metrics, tiny

    rng = np.random.default_rng(0)
    spread = label_free(rng.normal(size=(2000, 32)))
    assert 30 < spread["rankme"] <= 32 and spread["rankme_fraction"] > 0.93
    assert abs(spread["feature_std"] - 32 ** -0.5) < 0.01 and spread["feature_std_spread"] == pytest.approx(32 ** -0.5)
    plane = label_free(rng.normal(size=(2000, 2)) @ rng.normal(size=(2, 32)))
    assert 1.8 < plane["rankme"] < 2.05
    point = label_free(np.ones((2000, 32)) + 1e-4 * rng.normal(size=(2000, 32)))
    assert point["rankme"] < 1.1 and point["feature_std"] < 1e-3
    from vitx.runner import pretrain

    pretrain(tiny(tmp_path, monitor="embedded:digits(length=400, eval_length=100)", monitor_probes=["rankme"],
                  steps=3, save_every=3))
    rows = [r for r in metrics(tmp_path / "run") if "monitor_rankme" in r]
    assert [r["step"] for r in rows] == [0, 3]
    assert all(1 < r["monitor_rankme"] <= 64 and 0 < r["monitor_feature_std"] < 1 for r in rows)
    assert not any("monitor_knn" in r for r in rows)  # only what was asked


def test_a_plugin_evaluator_without_settings_is_one_warning_not_a_broken_command_line(tmp_path):
    """An evaluator whose `config` is not a settings dataclass gets no `vitx eval` command and one warning line;
    every other command still runs."""
    plugin = tmp_path / "broken.py"
    plugin.write_text("from vitx import register_evaluator\nfrom vitx.evaluators import Evaluator\n\n\n"
                      "@register_evaluator('broken')\nclass Broken(Evaluator):\n    config = None\n")
    done = vitx_cli("--plugin", str(plugin), "eval", "--help")
    assert done.returncode == 0 and "knn" in done.stdout and "broken" not in done.stdout
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: evaluator broken")]
    assert len(warnings) == 1 and "no command" in warnings[0]
