"""Task data in the hub format: clip-benchmark's VTAB WebDataset copies (`clip-benchmark/wds_vtab-<task>`).

Layout (on the hub, or downloaded to a folder): `train/*.tar`, `test/*.tar` (and, in copies that have it,
`validation/*.tar`), each sample a `webp` (or png/jpg) image and a `cls` integer label, plus `classnames.txt`.
Online and local copies go through the same call, `datasets.load_dataset("webdataset", data_files=...)`: only
the base differs (`hf://datasets/<repo>` or the folder). A `datasets.save_to_disk` folder works too.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..data.sources import HFImageSource
from ..data.streams import check_complete
from ..errors import VitxError

SPLIT_DIRS = {"train": ("train",), "val": ("validation", "valid", "val"), "test": ("test",)}
IMAGE_EXTS = ("webp", "png", "jpg", "jpeg")


def _download_hint(repo: str, task: str) -> str:
    return (f"download it where you have internet (`hf download {repo} --repo-type dataset --local-dir DIR`) "
            f"and pass --data-dir DIR")


def open_hub_splits(repo: str, task: str, data_dir: str | None) -> dict[str, Any]:
    """{'train', 'val' (None when absent), 'test'} → HFImageSource, from `data_dir` or the hub."""
    if data_dir is not None:
        base = Path(data_dir).expanduser()
        if not base.is_dir():
            raise VitxError(f"--data-dir {data_dir} is not a folder")
        if (base / "dataset_dict.json").exists():
            return _from_saved(base, task)
        found = {split: next((d for d in dirs if list((base / d).glob("*.tar"))), None)
                 for split, dirs in SPLIT_DIRS.items()}
        if found["train"] is None or found["test"] is None:
            raise VitxError(f"--data-dir {data_dir} does not hold {task}: expected the VTAB-1k folder release "
                            f"(train800.txt, val200.txt, train800val200.txt, test.txt and images/), the hub format "
                            f"(train/*.tar and test/*.tar, as in {repo}), or a save_to_disk folder")
        files = {split: sorted(str(p) for p in (base / d).glob("*.tar")) for split, d in found.items() if d}
        for shards in files.values():
            check_complete(shards)
        origin = str(base)
    else:
        files = {"train": f"hf://datasets/{repo}/train/*.tar", "test": f"hf://datasets/{repo}/test/*.tar"}
        origin = repo
    import datasets

    try:
        dd = datasets.load_dataset("webdataset", data_files=files)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        where = f"--data-dir {data_dir}" if data_dir else f"the Hugging Face hub ({repo})"
        hint = "" if data_dir else "; offline, " + _download_hint(repo, task)
        raise VitxError(f"cannot load {task} from {where}: {first}{hint}") from None
    return {split: (HFImageSource(dd[split], f"{origin}:{split}") if split in dd else None)
            for split in ("train", "val", "test")}


def _from_saved(base: Path, task: str) -> dict[str, Any]:
    import datasets

    try:
        dd = datasets.load_from_disk(str(base))
    except Exception as exc:
        raise VitxError(f"cannot read dataset folder {base}: {exc}") from None
    out: dict[str, Any] = {}
    for split, names in SPLIT_DIRS.items():
        name = next((n for n in names if n in dd), None)
        out[split] = HFImageSource(dd[name], f"{base}:{name}") if name else None
    if out["train"] is None or out["test"] is None:
        raise VitxError(f"{base} needs train and test splits for {task} (has {', '.join(dd)})")
    return out


def hub_repo(suffix: str) -> str:
    return f"clip-benchmark/wds_vtab-{suffix}"


def missing_data_message(task: str, repo: str) -> str:
    return f"{task} has no data offline: " + _download_hint(repo, task)


__all__ = ["IMAGE_EXTS", "hub_repo", "missing_data_message", "open_hub_splits"]
