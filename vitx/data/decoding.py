"""Image decoding for loader workers: file bytes or PIL images → (3, H, W) uint8 tensors.

Sources hand over an `EncodedImage` (the file's bytes and a name for errors) where they can, so decoding
happens in a loader worker, not where the source is read (a stream's reader, the main process). JPEGs go
through `torchvision.io.decode_jpeg` (libjpeg-turbo; ~1.3× PIL's decode on the same core, and the tensor
it returns feeds `transforms.v2` on uint8 with no copy); other formats through `torchvision.io.decode_image`,
then PIL for what neither reads. A file none can read raises `CorruptImageError` naming it.
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from ..errors import CorruptImageError

if TYPE_CHECKING:
    import torch

JPEG_MAGIC = b"\xff\xd8\xff"


@dataclass(frozen=True)
class EncodedImage:
    """An image file's bytes, not yet decoded; `name` (a path, or `#i of <source>`) names it in errors."""

    data: bytes
    name: str

    @classmethod
    def from_file(cls, path: str) -> "EncodedImage":
        """A local file, or a remote one (`hf://`, `zip://`, ... as streamed image folders name them)."""
        try:
            if "://" in path:
                from datasets.utils.file_utils import xopen

                with xopen(path, "rb") as f:
                    return cls(f.read(), path)
            with open(path, "rb") as f:
                return cls(f.read(), path)
        except OSError as exc:
            raise CorruptImageError(f"cannot read image {path}: {exc.strerror or exc}") from None


def decode(image: Any) -> "torch.Tensor":
    """An `EncodedImage`, PIL image, (H, W, 3) uint8 array or (3, H, W) uint8 tensor → (3, H, W) uint8 RGB."""
    import torch

    if isinstance(image, EncodedImage):
        return _decode_bytes(image)
    if isinstance(image, torch.Tensor):
        if image.dtype != torch.uint8 or image.ndim != 3 or image.shape[0] != 3:
            raise ValueError(f"expected a (3, H, W) uint8 tensor, got {tuple(image.shape)} {image.dtype}")
        return image
    if isinstance(image, Image.Image):
        image = np.asarray(image.convert("RGB"))
    arr = np.ascontiguousarray(image, dtype=np.uint8)  # (H, W, 3)
    return torch.from_numpy(arr.copy() if not arr.flags.writeable else arr).permute(2, 0, 1)  # (3, H, W)


def _decode_bytes(image: EncodedImage) -> "torch.Tensor":
    import torch
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    raw = torch.from_numpy(np.frombuffer(image.data, dtype=np.uint8).copy())  # (bytes,)
    try:
        if image.data[:3] == JPEG_MAGIC:
            out = decode_jpeg(raw, mode=ImageReadMode.RGB)
        else:
            out = decode_image(raw, mode=ImageReadMode.RGB)
        if out.ndim == 3 and out.shape[0] == 3:
            if out.dtype != torch.uint8:  # 16-bit PNGs: scale to 8 bits, never wrap
                from torchvision.transforms.v2.functional import to_dtype

                out = to_dtype(out, torch.uint8, scale=True)
            return out
    except Exception:  # noqa: BLE001 — formats torchvision cannot read, or a damaged file: PIL decides
        pass
    try:
        with Image.open(io.BytesIO(image.data)) as img:
            return decode(img.convert("RGB"))  # convert forces the full decode
    except Exception as exc:
        reason = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(exc)) or type(exc).__name__
        raise CorruptImageError(f"cannot decode image {image.name}: {reason}") from None
