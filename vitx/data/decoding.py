"""Image decoding for loader workers: file bytes or PIL images → (3, H, W) uint8 tensors.

Sources hand over an `EncodedImage` (the file's bytes and a name for errors) where they can, so decoding
happens in a loader worker, not where the source is read (a stream's reader, the main process). JPEGs go
through `torchvision.io.decode_jpeg` (libjpeg-turbo; ~1.3× PIL's decode on the same core, and the tensor
it returns feeds `transforms.v2` on uint8 with no copy); other formats through `torchvision.io.decode_image`,
then PIL for what neither reads. A file none can read raises `CorruptImageError` naming it, and so does one
whose header claims more pixels than `PIL.Image.MAX_IMAGE_PIXELS` (read before anything is decoded: torchvision
has no decompression-bomb limit, and a 50 KB PNG can claim 20000x20000 pixels, 1.2 GB decoded). Where
torchvision's decoder cannot be used at all (a warning made an error by `python -W error`, its codec library
missing), the process says so once and decodes with PIL.
"""
from __future__ import annotations

import io
import re
import sys
import warnings
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
        opener = open
        try:
            if "://" in path:
                from datasets.utils.file_utils import xopen as opener
            with opener(path, "rb") as f:
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
        image = _rgb(image)
    arr = np.ascontiguousarray(image, dtype=np.uint8)  # (H, W, 3)
    return torch.from_numpy(arr.copy() if not arr.flags.writeable else arr).permute(2, 0, 1)  # (3, H, W)


SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")  # PIL's 16-bit grey modes (TIFF, PGM)


def _rgb(image: Image.Image) -> np.ndarray:
    """A PIL image as (H, W, 3) uint8 RGB. 16-bit grey ("I;16", and "I", as PIL opens 16-bit PGM and PNG) is
    scaled to 8 bits as torchvision scales a 16-bit PNG (the top 8 bits), where PIL's convert("RGB") clips it (a
    16-bit TIFF all but white); one scale for every image, never chosen from an image's own values. Float grey
    ("F") in [0, 1] (the usual float scale, which convert turned black) is times 255, above 1 and up to 255 is
    read as convert("RGB") reads it (truncated); values no scale fits are refused, never guessed."""
    if image.mode in SIXTEEN_BIT + ("I", "F"):
        grey = np.asarray(image, dtype=np.float64)  # (H, W)
        low, high = (float(grey.min()), float(grey.max())) if grey.size else (0.0, 0.0)
        if not np.isfinite(grey).all() or low < 0 or high > (255 if image.mode == "F" else 65535):
            raise CorruptImageError(f"a {'floating-point' if image.mode == 'F' else '32-bit'} grey image with "
                                    f"values in [{low:g}, {high:g}]: its scale is unknown; convert it to 8 or 16 bits")
        if image.mode != "F":
            grey = np.floor(grey / 256)  # (the top 8 of 16 bits, as torchvision's to_dtype)
        elif high <= 1:
            grey = np.rint(grey * 255)
        return np.repeat(np.floor(grey).astype(np.uint8)[:, :, None], 3, axis=2)  # (H, W, 3)
    return np.asarray(image.convert("RGB"))


_torchvision_unusable: str | None = None  # why torchvision's decoder cannot be used in this process, once known


def _check_pixels(image: EncodedImage) -> None:
    """Refuse an image whose header claims more than `PIL.Image.MAX_IMAGE_PIXELS` pixels, before decoding it.
    PIL's lazy open reads the header alone; a file it cannot open is left for the decoders to judge."""
    limit = Image.MAX_IMAGE_PIXELS
    if not limit:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, in our own words
            with Image.open(io.BytesIO(image.data)) as img:
                pixels, shown = img.width * img.height, f"{img.width}x{img.height} pixels"
    except Image.DecompressionBombError as exc:  # PIL's own refusal, above twice its limit
        found = re.search(r"\((\d+) pixels\)", str(exc))
        pixels, shown = (int(found.group(1)), f"{int(found.group(1)):,} pixels") if found else (limit + 1, "too large")
    except Exception:  # noqa: BLE001 — not an image PIL knows: the decoders decide, and name it if corrupt
        return
    if pixels > limit:
        raise CorruptImageError(f"image {image.name} is {shown}, more than the {limit:,} pixels vitx decodes "
                                "(PIL.Image.MAX_IMAGE_PIXELS, a guard against decompression bombs); resize it first")


def _unusable(reason: str) -> None:
    """Record that torchvision's decoder cannot be used here and say so, once per process: every image now goes
    through PIL, which is slower, and nobody should have to find that out from a profile."""
    global _torchvision_unusable
    _torchvision_unusable = reason
    print(f"warning: torchvision cannot decode images here ({reason}); decoding with PIL instead (slower)",
          file=sys.stderr)


def _torchvision_decode(image: EncodedImage) -> "torch.Tensor | None":
    """torchvision's (3, H, W) uint8 decode, or None for PIL to try: a format torchvision does not read, a
    damaged file (PIL names it), or a decoder unusable in this process (said once, by `_unusable`)."""
    import torch

    if _torchvision_unusable is not None:
        return None
    try:
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg
    except ImportError as exc:  # a torchvision without image decoding (deprecated since 0.29)
        _unusable(f"torchvision.io has no image decoders: {exc}")
        return None
    raw = torch.from_numpy(np.frombuffer(image.data, dtype=np.uint8).copy())  # (bytes,)
    try:
        out = (decode_jpeg if image.data[:3] == JPEG_MAGIC else decode_image)(raw, mode=ImageReadMode.RGB)
    except Warning as exc:  # a warning made an error (python -W error): the decoder's fault, not the file's
        _unusable(f"{type(exc).__name__}: {str(exc).split('. ')[0].strip()}")
        return None
    except Exception as exc:  # noqa: BLE001 — a format torchvision cannot read, or a damaged file: PIL decides
        if "image extension" in str(exc):  # "Couldn't load the image extension": its codec library is missing
            _unusable("its image extension (libjpeg, libpng) did not load")
        return None
    if out.ndim != 3 or out.shape[0] != 3:
        return None
    if out.dtype != torch.uint8:  # 16-bit PNGs: scale to 8 bits, never wrap
        from torchvision.transforms.v2.functional import to_dtype

        out = to_dtype(out, torch.uint8, scale=True)
    return out


def _decode_bytes(image: EncodedImage) -> "torch.Tensor":
    _check_pixels(image)
    out = _torchvision_decode(image)
    if out is not None:
        return out
    try:
        with Image.open(io.BytesIO(image.data)) as img:
            return decode(img)  # (`_rgb` forces the full decode)
    except Exception as exc:
        reason = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(exc)) or type(exc).__name__
        raise CorruptImageError(f"cannot decode image {image.name}: {reason}") from None
