"""A representation monitor for pre-training: how transferable the backbone's features are, while it trains.

`--monitor DATA` (a labelled `--data` spec, e.g. `embedded:digits`, or several, comma-separated) runs, at every
checkpoint and every `--monitor-every` steps, the evaluators `--monitor-probes` names (vitx/evaluators/, found
by name in the registry) on frozen features of seeded draws of DATA's train and test splits (2,000 and 1,000
images, decoded once at the run's resolution and held in memory). The built-in ones:

- fewshot (`monitor_fewshot_<k>shot`): the closed-form least-squares head of `vitx eval fewshot` (big_vision's
  fewshot evaluator) on k images per class, averaged over 3 seeded draws;
- knn (`monitor_knn`): cosine similarity to every train image, the 20 nearest voting with weights
  exp(sim / 0.07) (the kNN monitor of lightly's and InstDisc's self-supervised runs);
- linear (`monitor_linear`): `vitx eval linear`'s heads over its lr grid, 30 epochs, the lr chosen on a held-out
  fifth of the train draw, retrained on all of it and tested.
- rankme (`monitor_rankme`, `monitor_rankme_fraction`, `monitor_feature_std`): label-free, the effective rank
  of the features (RankMe) and the per-dimension s.d. of the normalised features, which fall towards 1 and 0
  when a representation collapses.

Features are what `--monitor-features` names (auto: what the objective trains). With several datasets, the
first keeps these keys and each other one has its own (`monitor_<name>_knn`, ...). Every process computes the
same figures from the whole sets (they are small), so the probes need no collective and a sharded model still
sees the same forwards on every process.
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
from ..registry import EVALUATORS
from ..spec import split_specs
from .features import extract_features


class Probe(Protocol):
    """What the runner calls during training: frozen features in (a module mapping (B, 3, S, S) images to
    (B, D)), named figures out, the same on every process. `Monitor` (one dataset) and `Monitors` (several) are
    probes; what they measure are the evaluators `--monitor-probes` names."""

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
        for name in self.probes:  # each evaluator's own figures (evaluators/NAME.py: `monitor`)
            evaluator = EVALUATORS.get(name).obj()
            figures = evaluator.monitor(train, y_train, test, y_test, self.num_classes, device)
            out.update({f"monitor_{key}": value for key, value in figures.items()})
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
