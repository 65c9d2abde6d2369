"""The objective contract: everything the runner needs to train with an objective, and nothing more.

An objective is an `nn.Module` built from a backbone and its options. It owns its heads, says whether it
needs labels, turns a batch into a loss and named metrics, and may hook step events. The runner never looks
inside it."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn as nn

from .options import check_options

if TYPE_CHECKING:
    from .options import Fitted
    from ..data.transforms import Preprocess
    from ..data.views import View


@dataclass(frozen=True)
class HeadFinding:
    """A state of an objective's own output that one of its logged figures shows, e.g. DINO's teacher whose
    output is uniform (entropy near log K) or one-hot: what the objective declares in `head_findings`. A head
    can tire while the backbone under it still learns (recipes/reproduction/DINO.md), so this names what to
    change in the objective rather than calling the run collapsed."""

    figure: str  # the metrics.jsonl key it reads, e.g. "teacher_entropy"
    value: float  # its value at this log step
    threshold: float  # the bound it passed (its rule says which way)
    state: str  # a short name of the state, e.g. "uniform", "one-hot": each state is said once per run
    said: str  # one clause with the figures, e.g. "the DINO teacher's output is uniform (entropy 6.90 ≥ ...)"
    advice: str  # what to change, naming the objective's options, e.g. "a lower teacher_temp"


class Objective(nn.Module):
    """Base class. Subclasses set `needs_labels` and implement `forward`, which takes `{"image": (B, 3, H, W)
    float, "label": (B,) or (B, K)}` (with `views()` declared: `{"views": [(B, 3, S_v, S_v) float, one per
    crop], "label": ...}`) and returns a dict of scalar tensors: `"loss"` (minimised) and any metrics
    (averaged over the logging interval and processes). Weights under `backbone.` are the transferable backbone;
    everything else is the objective's heads.

    State the optimiser must not train (an EMA teacher, a centre, a queue) is a submodule or buffer whose
    parameters do not require gradients: it is saved and resumed with the objective, never optimised, and
    kept out of the exported backbone (`teacher_backbone` names a teacher a user may export instead)."""

    needs_labels: ClassVar[bool] = False
    # the fewest images one process's micro-batch may hold (a contrastive loss needs other images as negatives, a
    # BatchNorm in a head more than one value per channel): a smaller --batch-size is refused before the run starts
    min_batch: ClassVar[int] = 1
    # the representation this objective trains, which frozen-feature evaluation reads unless told otherwise
    # (one of evaluation.FEATURES): masked modelling trains the patch tokens, never the [class] token
    features: ClassVar[str] = "pre-logits"
    # its options, declared once (objectives/options.py: a dataclass of `option`s, each with its type, default,
    # bounds and help): checked when it is built (an unknown option, a wrong type or a value out of bounds is one
    # line), listed by `vitx objectives NAME`, read as `self.settings`; None: undeclared (its constructor's own
    # keywords, unchecked)
    Options: ClassVar[type | None] = None
    name: ClassVar[str] = "objective"  # the name it is registered under (`register_objective` sets it)
    # the options it chose from the data (`fit_to_data`), set by the runner: said in the header, kept in config.json
    fitted: "Fitted | None" = None
    # the run settings (vitx/settings names) its reference trains with, given wherever the user, a recipe file and
    # --set leave them unset, and listed in the run's header and config.json (`from_objective`): so `vitx pretrain
    # --objective dino` runs main_dino.py's recipe. Among them how its gradients are clipped (`grad_clip_mode`:
    # global or per-parameter) and what weight decay spares (`decay_tokens`); docs/recipes.md sets each beside
    # its reference (file:line), and says why where a vitx default differs
    recipe: ClassVar[dict[str, Any]] = {}
    # the parts of `init_parts` whose shape the training data sets (the supervised classifier's classes): a source's
    # that does not fit this run's data starts new, said in the header, where any other misfit is refused
    sized_by_data: ClassVar[tuple[str, ...]] = ()
    # the optimiser steps of one pass over the training data (None: a stream of unknown length), set by the
    # runner before `on_fit_start`: for schedules the field states in epochs (DINO freezes its last layer for one)
    epoch_steps: int | None = None

    def __init__(self, backbone: nn.Module, **options: Any) -> None:
        super().__init__()
        self.backbone = backbone
        self.settings = type(self).checked(options)  # the declared options, every one filled (None: undeclared)
        self.options = dataclasses.asdict(self.settings) if self.settings is not None else dict(options)

    @classmethod
    def checked(cls, options: dict[str, Any]) -> Any:
        """`options` as an instance of the declared `Options` (defaults filled), or a one-line VitxError generated
        from the declaration; None when the objective declares none."""
        return None if cls.Options is None else check_options(cls.name, cls.Options, options)

    @classmethod
    def fit_to_data(cls, given: dict[str, Any], images: int, steps: int) -> "Fitted | None":
        """Options the user left unset that the objective's reference chooses from the number of training
        `images` and the run's `steps` (DINO's teacher temperatures, their warm-up and the output dimension, by
        lightly-train's rule), chosen before the
        objective is built (they size its heads); `given`: the options the user set. The runner builds with
        them, says them in the run's header with the rule, and records them in config.json (`objective.fitted`,
        which a resumed run is built with again). Not called for a stream (its size is unknown). None: nothing."""
        return None

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def configure_preprocess(self, preprocess: "Preprocess") -> "Preprocess":
        """See (and, if the objective needs to, change) the preprocessing before data loading starts;
        e.g. MPP reads the normalisation to recover pixel colours for its targets."""
        return preprocess

    def views(self) -> "tuple[View, ...]":
        """The crops of each image to train on, made in the loader's workers (`data/views.py`); (): one
        random resized crop, `batch["image"]`."""
        return ()

    def on_fit_start(self, step: int, steps: int) -> None:
        """Called before the first step of a run (fresh at step 0, or resumed at `step`) of `steps` in all:
        schedules of the objective's own (a teacher's momentum, a temperature warm-up) are functions of these,
        so a resumed run follows them exactly."""

    def on_after_backward(self) -> None:
        """Called once per optimiser step, after gradients are complete and before clipping."""

    def on_step_end(self, step: int) -> None:
        """Called after each optimiser step (EMA teachers, schedules of the objective's own)."""

    def teacher_backbone(self) -> nn.Module | None:
        """A backbone the objective keeps besides the trained one (a self-distillation teacher), saved as
        teacher.safetensors with every checkpoint, monitored beside the student, exported with
        `vitx export --export-teacher`; None: no teacher."""
        return None

    def representation_layer(self) -> nn.Module | None:
        """The layer between the backbone's pooled output and the logits whose output is the pre-logits (the
        supervised head's Linear → tanh), read by the representation monitor as few-shot evaluation reads it;
        None: the pre-logits are the backbone's output."""
        return None

    def head_findings(self, metrics: dict[str, float]) -> "list[HeadFinding]":
        """What this objective's own figures say of its head's output (a teacher's output uniform or one-hot,
        say): one `HeadFinding` per rule that holds, [] when none does. Called at every log step with the logged
        means of `forward`'s metrics. A head finding is not a collapse: the collapse watch
        (evaluation/collapse.py) says it as a note, and as a collapse only once the features themselves stop
        improving with it (their RankMe, the monitor's accuracy), which it reads for every objective."""
        return []

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The objective's own weights (not the backbone's), saved beside the backbone in checkpoints."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("backbone.")}

    def init_parts(self) -> dict[str, tuple[str, ...]]:
        """The parts of the objective's own state that `vitx pretrain --from` restores from a run of the same
        objective (or a released checkpoint it reads, `released_state`), each by the name the run's header says
        it under → the state-dict key prefixes it holds: `{"decoder": ("decoder.",)}`. A part the source lacks
        starts new, and is said so; {}: only the backbone continues."""
        return {}

    def released_state(self, layout: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This objective's own state (keys as its `state_dict`'s) from the non-backbone weights of a checkpoint
        its authors released, in `layout` (runs/released.py names them: `dino`: `student.head.*`,
        `teacher.backbone.*`, `teacher.head.*`, `dino_loss.center`); `init_parts` then restores it. {}: this
        objective reads no such layout, and `--from` says it dropped those weights."""
        return {}
