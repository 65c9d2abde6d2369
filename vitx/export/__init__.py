"""`vitx export`: a finished run as a Hugging Face hub folder that timm loads as it is (`layout.py`), its model
card (`card.py`, with the command that made the run: `command.py`), and the upload (`push.py`)."""
from ..lazy import lazy_exports

__all__ = ["command_line", "export_run", "model_card", "push_folder"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "command_line": ".command", "export_run": ".layout", "model_card": ".card", "push_folder": ".push"})
