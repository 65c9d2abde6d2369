"""A representation monitor for pre-training: how transferable the backbone's features are, while it trains.

`--monitor DATA` (a labelled `--data` spec, e.g. `embedded:digits`, or several, comma-separated) evaluates, at
every checkpoint and every `--monitor-every` steps, two frozen-feature probes on seeded draws of DATA's train and
test splits:

- few-shot linear accuracy (`monitor_fewshot_<k>shot`): the closed-form least-squares head of `vitx eval
  fewshot` (big_vision's fewshot evaluator) on k images per class, averaged over 3 seeded draws;
- k-nearest-neighbour accuracy (`monitor_knn`): cosine similarity to every train image, the 20 nearest voting
  with weights exp(sim / 0.07) (the kNN monitor of lightly's and InstDisc's self-supervised runs);
- with `--monitor-probes ...,linear`, a linear probe (`monitor_linear`): `vitx eval linear`'s heads over its lr
  grid, 30 epochs, the lr chosen on a held-out fifth of the train draw, retrained on all of it and tested.

Features are the pre-logits, as `vitx eval fewshot` reads them (the supervised head's tanh layer when the
objective has one, else the backbone's pooled output), from images decoded once at the run's resolution and
held in memory. With several datasets, the first keeps these keys and each other one has its own
(`monitor_<name>_knn`, `monitor_<name>_fewshot_<k>shot`). Every process computes the same figures from the whole sets (they are small), so the probes need no
collective and a sharded model still sees the same forwards on every process.
"""
from __future__ import annotations

import re
from typing import Protocol

import numpy as np
import torch

from ..data import Preprocess, decode_split
from ..data.draws import balanced_draw
from ..data.opener import DataOptions, open_labelled
from ..data.sources import source_labels
from ..spec import split_specs
from .features import extract_features
from .fewshot import fewshot_accuracy
from .knn import knn_accuracy
from .linear import linear_probe

SHOTS = (1, 10)
SEEDS = (0, 1, 2)
LINEAR_MONITOR_EPOCHS = 30  # a probe at every checkpoint: a few seconds on a CPU for 2,000 images


class Evaluator(Protocol):
    """What the runner calls during training (and what `vitx eval` runs from the command line): frozen features
    in (a module mapping (B, 3, S, S) images to (B, D)), named figures out, the same on every process. `Monitor`
    (one dataset: few-shot and kNN) and `Monitors` (several) are evaluators; a new probe is another."""

    def __call__(self, features: torch.nn.Module, device: torch.device) -> dict[str, float]: ...


class Monitor:
    """The probes' data (decoded once) and their evaluation on a backbone."""

    def __init__(self, spec: str, image_size: int, train_images: int = 2000, test_images: int = 1000,
                 mean: tuple[float, ...] = (0.5, 0.5, 0.5), std: tuple[float, ...] = (0.5, 0.5, 0.5),
                 probes: tuple[str, ...] = ("fewshot", "knn")) -> None:
        train, test = open_labelled(spec, "--monitor", DataOptions(image_size=image_size))
        self.spec, self.num_classes, self.probes = spec, int(train.num_classes), probes
        self.preprocess = Preprocess(image_size=image_size, mean=mean, std=std)  # the run's own normalisation
        labels = source_labels(train)
        chosen = balanced_draw(labels, min(train_images, len(train)), [0, 77])  # never the first N: data is often
        self.shots = tuple(k for k in SHOTS if np.bincount(labels[chosen], minlength=self.num_classes).min() >= k)
        tests = np.sort(np.random.default_rng([0, 78]).permutation(len(test))[:test_images])  # sorted by class
        self.train = decode_split(train, self.preprocess, chosen)
        self.test = decode_split(test, self.preprocess, tests)

    @torch.no_grad()
    def __call__(self, backbone: torch.nn.Module, device: torch.device) -> dict[str, float]:
        """`backbone`: images (B, 3, S, S) -> features (B, D), e.g. a `Representation`."""
        was_training = backbone.training
        train = extract_features(backbone, self.train.images, device=device, normalise=self.preprocess.normalise)
        test = extract_features(backbone, self.test.images, device=device, normalise=self.preprocess.normalise)
        backbone.train(was_training)
        y_train, y_test = self.train.labels.numpy(), self.test.labels.numpy()
        out: dict[str, float] = {}
        if "fewshot" in self.probes:
            fewshot = fewshot_accuracy(train, y_train, test, y_test, self.num_classes, self.shots, SEEDS)
            out.update({f"monitor_fewshot_{k}shot": float(np.mean(accs)) for k, accs in fewshot.items()})
        if "knn" in self.probes:
            out["monitor_knn"] = knn_accuracy(train, y_train, test, y_test, self.num_classes)
        if "linear" in self.probes:
            with torch.enable_grad():
                probe = linear_probe(train, y_train, test, y_test, self.num_classes, {"f": slice(0, train.shape[1])}, ["f"],
                                     epochs=LINEAR_MONITOR_EPOCHS, device=device)
            out["monitor_linear"] = probe["test_top1"]
        return out


class Monitors:
    """`--monitor a,b,...`: one `Monitor` per dataset. The first dataset's figures keep the plain keys (a run
    monitored on one dataset compares with one monitored on several); each other one's are named after it."""

    def __init__(self, specs: str, image_size: int, mean: tuple[float, ...] = (0.5, 0.5, 0.5),
                 std: tuple[float, ...] = (0.5, 0.5, 0.5), probes: tuple[str, ...] = ("fewshot", "knn")) -> None:
        self.monitors: list[tuple[str, Monitor]] = []
        for i, spec in enumerate(split_specs(specs, "--monitor")):
            tag = "" if i == 0 else dataset_tag(spec, {t for t, _ in self.monitors})
            self.monitors.append((tag, Monitor(spec, image_size, mean=mean, std=std, probes=probes)))

    def __call__(self, backbone: torch.nn.Module, device: torch.device) -> dict[str, float]:
        out: dict[str, float] = {}
        for tag, monitor in self.monitors:
            for key, value in monitor(backbone, device).items():
                out[key.replace("monitor_", f"monitor_{tag}_", 1) if tag else key] = value
        return out


def dataset_tag(spec: str, taken: set[str]) -> str:
    """A short name for a dataset's metric keys: `embedded:shapes(length=200)` → shapes, `hf:owner/cifar10` →
    cifar10, `~/data/photos/` → photos; made unique among `taken`."""
    base = spec.split("(")[0].rstrip("/").split(":")[-1].split("/")[-1]
    tag = re.sub(r"[^a-z0-9]+", "_", base.lower()).strip("_") or "data"
    unique, n = tag, 2
    while unique in taken or unique == "":
        unique, n = f"{tag}{n}", n + 1
    return unique
