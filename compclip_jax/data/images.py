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

# Modes that carry an alpha channel; P, L and RGB images may carry one as a `transparency` entry instead.
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa")


def to_rgb(img: Image.Image) -> Image.Image:
  """Any PIL mode → RGB as PIL's `convert("RGB")` does: alpha is dropped (not composited), palette colours are looked
  up, CMYK is converted, 16/32-bit greyscale is clipped to 0..255 (what both references get from PIL)."""
  if img.mode == "RGB":
    return img
  if img.mode in ("RGBa", "PA"):  # no direct PIL conversion to RGB; RGBA first gives the same colours
    img = img.convert("RGBA")
  return img.convert("RGB")


def to_rgb_or_rgba(img: Image.Image) -> Image.Image:
  """Any PIL mode → "RGBA" if it has a pixel that is not fully opaque, else "RGB" (METHODS §1.2 step 3).

  Equals the CLIC reference's `convert("RGBA")` (alpha from an alpha channel or a palette/greyscale/RGB
  `transparency` entry, CMYK converted, 16-bit greyscale clipped) except that a fully opaque image comes back as
  RGB: resizing it in RGBA and then dropping alpha gives bit-identical pixels (tested), and RGB resizes faster.
  """
  if img.mode not in _ALPHA_MODES and "transparency" not in img.info:
    return to_rgb(img)
  rgba = img if img.mode == "RGBA" else img.convert("RGBA")
  lo, _ = rgba.getchannel("A").getextrema()
  return rgba if lo < 255 else rgba.convert("RGB")


def has_transparency(img: Image.Image) -> bool:
  """Whether `img` has a pixel that is not fully opaque: the images `data.alpha_premultiplied_resize` changes."""
  return to_rgb_or_rgba(img).mode == "RGBA"


def finish_rgb(img: Image.Image, premultiplied_alpha: bool = True) -> Image.Image:
  """An image about to be resized → the mode to resize it in.

  premultiplied_alpha=True (`data.alpha_premultiplied_resize`, the CLIC reference and open_clip's eval transform):
  keep alpha; PIL resizes RGBA with premultiplied alpha, so fully transparent pixels come out black, and alpha is
  dropped after the resize (`as_array`). False: drop alpha now, keeping the colour stored under transparent pixels.
  """
  if img.mode not in ("RGB", "RGBA") or "transparency" in img.info:  # e.g. an image straight from Image.open
    img = to_rgb_or_rgba(img)
  return img if premultiplied_alpha else to_rgb(img)


def as_array(img: Image.Image) -> np.ndarray:
  """RGB or RGBA PIL image → uint8 [H, W, 3] (alpha dropped, not composited)."""
  return np.asarray(img if img.mode == "RGB" else to_rgb(img))


def load_image(src: str | bytes, name: str, max_pixels: int = MAX_PIXELS, min_side: int = MIN_SIDE) -> Image.Image:
  """Decode a path or encoded bytes to an RGB PIL image — RGBA if it has transparent pixels, which the resize
  (`squash`, `Preprocess.resize_crop`) needs to treat as the reference does — or raise BadRecord naming `name` and
  the reason. Decoded once; callers that want RGB whatever the image use `to_rgb` on the result.

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
    try:
      return to_rgb_or_rgba(img)
    except (OSError, ValueError) as e:  # a mode PIL cannot convert (e.g. some LAB / multi-band TIFFs)
      raise BadRecord("corrupt_image", f"{name}: cannot convert PIL mode {img.mode} to RGB: {e}") from None


def decode_rgb(data: bytes | np.ndarray) -> np.ndarray:
  """Encoded image bytes (the prepared format's pre-resized images) → uint8 [H, W, 3]; arrays pass through."""
  if isinstance(data, np.ndarray):
    return data
  return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def orientation(width: int, height: int) -> str:
  """METHODS §1.2 step 1: 'wide' if width ≥ height (squares are wide), else 'tall'."""
  return "wide" if width >= height else "tall"


def squash(img: Image.Image, width: int, height: int, premultiplied_alpha: bool = True) -> np.ndarray:
  """Resize to exactly width×height ignoring aspect ratio (bicubic) → uint8 [height, width, 3].

  Alpha as `finish_rgb` says (METHODS §1.2 step 3: the reference resizes RGBA and drops alpha afterwards).
  """
  img = finish_rgb(img, premultiplied_alpha)
  if img.size != (width, height):
    img = img.resize((width, height), Image.Resampling.BICUBIC)
  return as_array(img)


def normalize(rgb_uint8: np.ndarray, mean, std) -> np.ndarray:
  """[..., 3] uint8 → float32 (x/255 − mean)/std."""
  x = rgb_uint8.astype(np.float32) / np.float32(255.0)
  return (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)


@dataclasses.dataclass(frozen=True)
class Preprocess:
  """PIL image → float32 [size, size, 3]: shorter side to `resize` (default `size`), centre crop to `size`, normalise.

  Matches transformers' CLIPImageProcessor: the long side becomes int(resize · long / short) (truncated), PIL
  resampling `resample` (3 = bicubic), crop offsets (new − size) // 2, zero padding where the resized image is smaller
  than the crop, then x/255, mean, std. `hf_config` keeps the `preprocessor_config.json` it was read from, which
  `to_hf_dict` writes back unchanged.
  """
  size: int = 224
  mean: tuple[float, float, float] = OPENAI_MEAN
  std: tuple[float, float, float] = OPENAI_STD
  resize: int | None = None  # shortest edge before the crop; None: `size` (resize = crop)
  resample: int = 3  # PIL.Image.Resampling code (BICUBIC)
  # SigLIP's SiglipImageProcessor: the whole image resized to size × size (aspect not kept), no crop
  squash: bool = False
  hf_config: dict | None = dataclasses.field(default=None, compare=False, repr=False)

  def resize_crop(self, img: Image.Image, premultiplied_alpha: bool = True) -> np.ndarray:
    """→ uint8 [size, size, 3]. Alpha as `finish_rgb` says: by default resized with the image (premultiplied by
    PIL) and dropped after the crop, as open_clip's eval transform (its RGB conversion comes last) — METHODS §1.4."""
    img = finish_rgb(img, premultiplied_alpha)
    if self.squash:
      return as_array(img.resize((self.size, self.size), Image.Resampling(self.resample)))
    edge = self.resize or self.size
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(edge * long / short)
    new_w, new_h = (edge, new_long) if w <= h else (new_long, edge)
    img = img.resize((new_w, new_h), Image.Resampling(self.resample))
    if new_w >= self.size and new_h >= self.size:
      top, left = (new_h - self.size) // 2, (new_w - self.size) // 2
      return as_array(img.crop((left, top, left + self.size, top + self.size)))
    # smaller than the crop: zero-padded, centred as transformers' center_crop pads (ceil of half the shortfall)
    out = np.zeros((max(new_h, self.size), max(new_w, self.size), 3), np.uint8)
    pt, pl = -(-(out.shape[0] - new_h) // 2), -(-(out.shape[1] - new_w) // 2)
    out[pt:pt + new_h, pl:pl + new_w] = as_array(img)
    top, left = (new_h - self.size) // 2 + pt, (new_w - self.size) // 2 + pl
    return out[max(0, top):top + self.size, max(0, left):left + self.size]

  def __call__(self, img: Image.Image) -> np.ndarray:
    return normalize(self.resize_crop(img), self.mean, self.std)

  @classmethod
  def from_hf_dir(cls, directory: str, default_size: int) -> "Preprocess":
    """From `preprocessor_config.json` when present (resize edge, crop size, resample, mean, std), else OpenAI's
    constants at `default_size`. A config this class cannot follow exactly raises ValueError naming the file."""
    path = os.path.join(directory, "preprocessor_config.json")
    if not os.path.exists(path):
      return cls(size=default_size)
    with open(path) as f:
      return cls.from_hf_dict(json.load(f), default_size, path)

  @classmethod
  def from_hf_dict(cls, d: dict, default_size: int, source: str = "preprocessor_config.json") -> "Preprocess":
    def bad(why):
      return ValueError(f"{source}: {why}; this project follows CLIPImageProcessor's shortest-edge resize + square "
                        "centre crop, or SiglipImageProcessor's square resize, + x/255 + mean/std only")

    # SiglipImageProcessor's config: size {"height", "width"} and no crop (nor, in the released files, its flag)
    squash = "crop_size" not in d and isinstance(d.get("size"), dict) and "height" in d["size"]
    for key, want in (("do_resize", True), ("do_center_crop", not squash), ("do_rescale", True),
                      ("rescale_factor", 1 / 255), ("do_normalize", True)):
      if d.get(key, want) != want:
        raise bad(f"{key}={d[key]!r}")
    if squash:  # SiglipImageProcessor: size {"height", "width"}, squashed
      size = d.get("size", {"height": default_size, "width": default_size})
      if not isinstance(size, dict) or set(size) != {"height", "width"} or size["height"] != size["width"]:
        raise bad(f"size {size} (a square resize without a crop needs equal height and width)")
      crop = edge = size["height"]
    else:
      crop = d.get("crop_size", default_size)
      if isinstance(crop, dict):
        if crop.get("height") != crop.get("width"):
          raise bad(f"crop_size {crop} is not square")
        crop = crop["height"]
      size = d.get("size", {"shortest_edge": crop})
      size = {"shortest_edge": size} if isinstance(size, int) else size
      if set(size) != {"shortest_edge"}:
        raise bad(f"size {size}")
      edge = size["shortest_edge"]
    if crop != default_size:
      raise ValueError(f"{source}: {'resize' if squash else 'crop'} size {crop} differs from the model's image_size "
                       f"{default_size}")
    return cls(size=crop, mean=tuple(d.get("image_mean", OPENAI_MEAN)), std=tuple(d.get("image_std", OPENAI_STD)),
               resize=None if edge == crop else edge, resample=int(d.get("resample", 3)), squash=squash,
               hf_config=dict(d))

  def to_hf_dict(self) -> dict:
    """The `preprocessor_config.json` of this transform: the one it was read from, unchanged, when it still
    describes this transform; else CLIPImageProcessor's (SiglipImageProcessor's, `squash`) keys from the fields."""
    if self.hf_config is not None and Preprocess.from_hf_dict(self.hf_config, self.size) == self:
      return dict(self.hf_config)
    if self.squash:
      return {
          "image_processor_type": "SiglipImageProcessor", "do_resize": True,
          "size": {"height": self.size, "width": self.size}, "resample": self.resample, "do_rescale": True,
          "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": list(self.mean), "image_std": list(self.std),
          "do_convert_rgb": True
      }
    return {
        "image_processor_type": "CLIPImageProcessor", "do_resize": True,
        "size": {"shortest_edge": self.resize or self.size}, "resample": self.resample, "do_center_crop": True,
        "crop_size": {"height": self.size, "width": self.size}, "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": True, "image_mean": list(self.mean), "image_std": list(self.std), "do_convert_rgb": True
    }
