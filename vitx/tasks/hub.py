"""Task data in the hub format: clip-benchmark's VTAB WebDataset copies (`clip-benchmark/wds_vtab-<task>`).

Layout (on the hub, or downloaded to a folder): `train/*.tar`, `test/*.tar` (and, in copies that have it,
`validation/*.tar`), each sample a `webp` (or png/jpg) image and a `cls` integer label, plus `classnames.txt`.
Online and local copies go through the same call, `datasets.load_dataset("webdataset", data_files=...)`: only
the base differs (`hf://datasets/<repo>` or the folder). A `datasets.save_to_disk` folder works too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..data.opener import DataOptions, open_data, open_shards
from ..errors import VitxError


def _download_hint(repo: str) -> str:
    return (f"download it where you have internet (`hf download {repo} --repo-type dataset --local-dir DIR`) "
            "and pass --data-dir DIR")


def open_hub_splits(repo: str, task: str, data_dir: str | None) -> dict[str, Any]:
    """{'train', 'val', 'test'} → sources (None where the copy has no such split), from `data_dir` or the hub
    (through the one opener, `data/opener.py`); whether the splits suffice is the task's question (splits.py)."""
    if data_dir is not None:
        base = Path(data_dir).expanduser()
        if not base.is_dir():
            raise VitxError(f"--data-dir {data_dir} is not a folder")
        from ..data.streams import is_shards

        try:
            if not (is_shards(str(base)) or (base / "dataset_dict.json").exists()):  # e.g. a suite's root
                raise VitxError("it holds neither tar shards nor a save_to_disk DatasetDict")
            opened = open_data(str(base))
        except VitxError as exc:
            raise VitxError(f"--data-dir {data_dir} does not hold {task} ({exc}); expected the VTAB-1k folder release "
                            f"(train800.txt, val200.txt, train800val200.txt, test.txt and images/), the hub format "
                            f"(train/*.tar and test/*.tar, as in {repo}), or a save_to_disk folder") from None
    else:
        files = {"train": [f"hf://datasets/{repo}/train/*.tar"], "test": [f"hf://datasets/{repo}/test/*.tar"]}
        try:
            opened = open_shards(files, repo, DataOptions())
        except VitxError as exc:
            raise VitxError(f"cannot load {task} from the Hugging Face hub ({repo}): {str(exc).split('; offline')[0]}; "
                            "offline, " + _download_hint(repo)) from None
    return {"train": opened.split("train"), "val": opened.split("validation"), "test": opened.split("test")}


def missing_data_message(task: str, repo: str, why: str = "") -> str:
    """`why`: the hub's reason (`vitx.hub.unreachable`), e.g. that huggingface.co cannot be reached."""
    return f"{task} has no data offline{f' ({why})' if why else ''}: " + _download_hint(repo)


__all__ = ["missing_data_message", "open_hub_splits"]
