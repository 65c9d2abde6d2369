"""Runs as they are read back: a finished run (`trained.py`: what predict and export use), a run folder's model
(`folder.py`: the backbone and the representation layer from safetensors), and a transfer's or an evaluation's
starting point (`start.py`: `--from` interpreted once: a vitx run, a timm model folder, `timm:<name>` or
scratch, with the input it expects). Nothing is unpickled."""
from ..lazy import lazy_exports

__all__ = ["RUN_HELP", "TrainedRun", "check_config", "classifier_heads", "describe_start", "is_timm_folder", "load_backbone",
           "load_classifier", "load_start", "representation", "resolve_run", "saved_layer", "start_data", "start_input"]
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(["RUN_HELP", "TrainedRun", "check_config", "classifier_heads", "load_classifier", "resolve_run"],
                    ".trained"),
    **dict.fromkeys(["load_backbone", "saved_layer"], ".folder"),
    **dict.fromkeys(["describe_start", "is_timm_folder", "load_start", "representation", "start_data", "start_input"],
                    ".start")})
