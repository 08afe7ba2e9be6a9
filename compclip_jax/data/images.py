"""Image preprocessing: the model's eval transform (METHODS §1.4, §3), channels last."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import warnings

import numpy as np
from PIL import Image

from compclip_jax.data.records import BadRecord
from compclip_jax.models.clip_config import OPENAI_MEAN, OPENAI_STD

MAX_PIXELS = 89_478_485  # PIL's own decompression-bomb threshold, checked before decoding
MIN_SIDE = 8  # smaller images (1×1 trackers, icons) carry no content worth a training sample

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def to_rgb(img: Image.Image) -> Image.Image:
  """Any PIL mode → RGB; alpha is dropped (not composited), palette and 16-bit images are converted."""
  if img.mode == "RGB":
    return img
  if img.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16/32-bit greyscale: scale to 8 bits before RGB
    a = np.asarray(img, dtype=np.float64)
    a = (a / max(a.max(), 1.0) * 255.0).round().astype(np.uint8)
    return Image.fromarray(a, "L").convert("RGB")
  if img.mode == "P":
    img = img.convert("RGBA")
  return img.convert("RGB")


def load_image(src: str | bytes, name: str, max_pixels: int = MAX_PIXELS, min_side: int = MIN_SIDE) -> Image.Image:
  """Decode a path or encoded bytes to an RGB PIL image, or raise BadRecord naming `name` and the reason.

  Reasons: missing, corrupt (unreadable or truncated), too_large (decompression bomb), too_small.
  """
  try:
    f = io.BytesIO(src) if isinstance(src, bytes) else open(src, "rb")  # pylint: disable=consider-using-with
  except FileNotFoundError:
    raise BadRecord("missing_image", f"{name}: file not found") from None
  except OSError as e:
    raise BadRecord("missing_image", f"{name}: {e}") from None
  with f:
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        img = Image.open(f)
        w, h = img.size
        if w * h > max_pixels:
          raise BadRecord("too_large", f"{name}: {w}×{h} exceeds the {max_pixels:,}-pixel limit")
        if min(w, h) < min_side:
          raise BadRecord("too_small", f"{name}: {w}×{h} is below {min_side} px on a side")
        img.load()
    except BadRecord:
      raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
      raise BadRecord("too_large", f"{name}: {e}") from None
    except (OSError, ValueError, SyntaxError) as e:  # PIL raises these for unreadable and truncated files
      raise BadRecord("corrupt_image", f"{name}: {e}") from None
  return to_rgb(img)


def decode_rgb(data: bytes | np.ndarray) -> np.ndarray:
  """Encoded image bytes (the prepared format's pre-resized images) → uint8 [H, W, 3]; arrays pass through."""
  if isinstance(data, np.ndarray):
    return data
  return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def orientation(width: int, height: int) -> str:
  """METHODS §1.2 step 1: 'wide' if width ≥ height (squares are wide), else 'tall'."""
  return "wide" if width >= height else "tall"


def squash(img: Image.Image, width: int, height: int) -> np.ndarray:
  """Resize to exactly width×height ignoring aspect ratio (bicubic) → uint8 [height, width, 3]."""
  if img.size != (width, height):
    img = img.resize((width, height), Image.Resampling.BICUBIC)
  return np.asarray(img)


def normalize(rgb_uint8: np.ndarray, mean, std) -> np.ndarray:
  """[..., 3] uint8 → float32 (x/255 − mean)/std."""
  x = rgb_uint8.astype(np.float32) / np.float32(255.0)
  return (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


@dataclasses.dataclass(frozen=True)
class Preprocess:
  """PIL image → float32 [size, size, 3]: shorter side to `size` (bicubic), centre crop, normalise.

  Matches transformers' CLIPImageProcessor (resize shortest edge, centre crop, rescale, normalise).
  """
  size: int = 224
  mean: tuple[float, float, float] = OPENAI_MEAN
  std: tuple[float, float, float] = OPENAI_STD

  def resize_crop(self, img: Image.Image) -> np.ndarray:
    """→ uint8 [size, size, 3]."""
    img = to_rgb(img)
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(self.size * long / short)
    new_w, new_h = (self.size, new_long) if w <= h else (new_long, self.size)
    img = img.resize((new_w, new_h), Image.Resampling.BICUBIC)
    top, left = (new_h - self.size) // 2, (new_w - self.size) // 2
    return np.asarray(img.crop((left, top, left + self.size, top + self.size)))

  def __call__(self, img: Image.Image) -> np.ndarray:
    return normalize(self.resize_crop(img), self.mean, self.std)

  @classmethod
  def from_hf_dir(cls, directory: str, default_size: int) -> "Preprocess":
    """From `preprocessor_config.json` when present (crop size, mean, std), else OpenAI's constants."""
    path = os.path.join(directory, "preprocessor_config.json")
    if not os.path.exists(path):
      return cls(size=default_size)
    with open(path) as f:
      d = json.load(f)
    crop = d.get("crop_size", default_size)
    size = crop.get("height", default_size) if isinstance(crop, dict) else int(crop)
    return cls(size=size, mean=tuple(d.get("image_mean", OPENAI_MEAN)), std=tuple(d.get("image_std", OPENAI_STD)))

  def to_hf_dict(self) -> dict:
    return {"image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": self.size},
            "resample": 3, "do_center_crop": True, "crop_size": {"height": self.size, "width": self.size},
            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": list(self.mean),
            "image_std": list(self.std), "do_convert_rgb": True}
