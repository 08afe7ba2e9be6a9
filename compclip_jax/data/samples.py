"""What every method's sample builder is made of (the builders themselves are in the methods' folders): a record's
images at the model's size, its cached analysis, the options every builder takes.

Records are dicts: `id`, `sentences` (list[str]), `image` (RGB PIL image, RGBA when it has transparent pixels; or
the pre-resized images of the prepared format under `half` / `full`, still encoded), optional `analysis` (aligned
with `sentences`; `Analysis`, its JSON object or that as text) and `paraphrases`.
Images leave here as uint8 [S, S, 3]; normalisation happens on device with the step kind's constants
(compclip_jax/methods/: `StepKind.normalization`), which keeps host→device traffic at a quarter. Which builder a step
kind uses, and with what partner, is the kind's choice (methods/<name>/); nothing here dispatches on a kind.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Callable, Sequence

import numpy as np
from compclip_jax.data.images import Preprocess, decode_rgb, orientation, squash
from compclip_jax.data.negatives import Analysis

Tagger = Callable[[Sequence[str]], list[Analysis]]


@dataclasses.dataclass(frozen=True, kw_only=True)  # keywords only: a field added here cannot shift a method's
class ImageOptions:
  """What every sample builder is given (a method's own options extend it: methods/<name>/, `StepKind.options`)."""
  image_size: int = 224
  # METHODS §1.2 step 3 / §1.4: images with transparency are resized with alpha (PIL premultiplies: fully transparent
  # pixels turn black) and alpha is dropped afterwards, as the CLIC reference and open_clip's eval transform do;
  # False drops alpha before resizing (`data.alpha_premultiplied_resize`).
  alpha_premultiplied_resize: bool = True
  # the model's eval transform resizes the whole image to a square (SigLIP) instead of resize + centre crop (CLIP);
  # set by the trainer from the model (train/trainer.py `make_pipelines`)
  squash: bool = False


def _analysis(a) -> Analysis:
  """A cached analysis: as it is, its JSON object (the prepared format), or that object as JSON text (TFDS)."""
  if isinstance(a, Analysis):
    return a
  return Analysis.from_json(json.loads(a) if isinstance(a, str) else a)


def analyses(rec: dict, idx: Sequence[int], tagger: Tagger | None) -> list[Analysis]:
  """The analysis of the record's sentences `idx`: from the prepared cache when present, else from the tagger."""
  if rec.get("analysis"):
    return [_analysis(rec["analysis"][i]) for i in idx]
  if tagger is None:
    raise ValueError(f"record {rec['id']}: no cached POS analysis and no tagger given")
  return tagger([rec["sentences"][i] for i in idx])


def half_image(rec: dict, size: int, premultiplied_alpha: bool = True) -> np.ndarray:
  """The record's image squashed to its CLIC half: 112 wide × 224 high if tall, 224 wide × 112 high if wide.
  `premultiplied_alpha`: see `SampleOptions.alpha_premultiplied_resize` (a prepared half is already resized)."""
  if "half" in rec:
    return decode_rgb(rec["half"])
  w, h = rec["image"].size
  width, height = (size // 2, size) if orientation(w, h) == "tall" else (size, size // 2)
  return squash(rec["image"], width, height, premultiplied_alpha)


def eval_image(rec: dict, size: int, premultiplied_alpha: bool = True, squash: bool = False) -> np.ndarray:
  """The model's eval transform without normalisation: shorter side → size (bicubic), centre crop; `squash`: the
  whole image → size × size (SigLIP). uint8. `premultiplied_alpha`: see `ImageOptions.alpha_premultiplied_resize`
  (a prepared image is already resized)."""
  if "full" in rec:
    if squash:  # the trainer refuses such a source first (train/trainer.py `_check_prepared`)
      raise ValueError(f"record {rec.get('id')}: a prepared image is a centre crop; a SigLIP needs the whole image")
    return decode_rgb(rec["full"])
  return Preprocess(size, squash=squash).resize_crop(rec["image"], premultiplied_alpha)


def model_image(rec: dict, opts: ImageOptions) -> np.ndarray:
  """`eval_image` at the options' size and alpha choice."""
  return eval_image(rec, opts.image_size, opts.alpha_premultiplied_resize, opts.squash)
