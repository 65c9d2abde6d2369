"""Upload an export folder to the Hugging Face hub (`HfApi().create_repo(exist_ok=True)` + `upload_folder`).

Offline (HF_HUB_OFFLINE=1, or the hub cannot be reached) and refusals (no token, no write access) are one line
that says where the exported folder is and how to push it later; the folder itself is kept.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import VitxError, first_line
from ..hub import OFFLINE, unreachable


def _later(folder: Path, repo_id: str) -> str:
    return f"the export is kept in {folder}; push it later with `vitx export ... --force --push {repo_id}` or " \
           f"`hf upload {repo_id} {folder}`"


def _is_connection_error(exc: BaseException) -> bool:
    """Network failures come as many types (requests', httpx's, huggingface_hub's OfflineModeIsEnabled)."""
    names = {t.__name__ for t in type(exc).__mro__}
    return bool(names & {"ConnectionError", "ConnectError", "ConnectTimeout", "Timeout", "TimeoutException",
                         "OfflineModeIsEnabled", "NetworkError", "ProxyError", "SSLError"}) or \
        isinstance(exc, (ConnectionError, TimeoutError))


def check_repo_id(repo_id: str) -> None:
    """A model repo is `owner/name`: checked before anything is written."""
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise VitxError(f"--push takes owner/name, got '{repo_id}'")


def push_folder(folder: Path, repo_id: str, files: tuple[str, ...] = ()) -> str:
    """Upload `folder` to the model repo `repo_id` (created if needed); returns the repo's URL. `files`: only
    these (an export written with --force among the user's own files uploads its files alone)."""
    check_repo_id(repo_id)
    why = unreachable()
    if why is not None:
        said = "the Hugging Face hub is offline here (HF_HUB_OFFLINE=1)" if why == OFFLINE else \
            f"cannot reach the Hugging Face hub ({why})"
        raise VitxError(f"cannot push to {repo_id}: {said}; " + _later(folder, repo_id))
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        repo = api.create_repo(repo_id, repo_type="model", exist_ok=True)
        api.upload_folder(repo_id=repo.repo_id, folder_path=str(folder), repo_type="model",
                          allow_patterns=list(files) or None, commit_message="Upload a ViT exported by vitx")
    except Exception as exc:  # noqa: BLE001 — whatever the hub client raises becomes one line, never a traceback
        why = "cannot reach the Hugging Face hub" if _is_connection_error(exc) else "the Hugging Face hub refused it"
        hint = "" if _is_connection_error(exc) else " (log in with `hf auth login` or set HF_TOKEN)"
        raise VitxError(f"cannot push to {repo_id}: {why} ({type(exc).__name__}: {first_line(exc)}){hint}; "
                        + _later(folder, repo_id)) from None
    return str(repo)


__all__ = ["check_repo_id", "push_folder"]
