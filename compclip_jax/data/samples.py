"""Sample builders: pure functions of a decoded record (a partner record where needed) and an np.random.Generator.

Records are dicts: `id`, `sentences` (list[str]), `image` (RGB PIL image, RGBA when it has transparent pixels; or
the pre-resized images of the prepared format under `half` / `full`, still encoded), optional `analysis` (aligned
with `sentences`; `Analysis` or its JSON) and `paraphrases`.
Images leave here as uint8 [S, S, 3]; normalisation happens on device with the step kind's constants
(compclip_jax/methods/: `StepKind.normalization`), which keeps host→device traffic at a quarter. Which builder a step
kind uses, and with what partner, is the kind's choice (methods/<name>.py); nothing here dispatches on a kind.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
from compclip_jax.data import negatives as neg
from compclip_jax.data.images import Preprocess, decode_rgb, orientation, squash
from compclip_jax.data.negatives import Analysis

Tagger = Callable[[Sequence[str]], list[Analysis]]


@dataclasses.dataclass(frozen=True)
class SampleOptions:
  image_size: int = 224
  clic_concat: bool = True  # False: METHODS §1.5 single-image ablation (p1 = p2, single-sentence swap, no Uni)
  # METHODS §1.2 step 4: the reference normalises concatenated CLIC images with ImageNet's constants whatever the
  # backbone; False uses the model's own (CLIP steps always use the model's).
  clic_imagenet_normalization: bool = True
  read_num_negatives: int = 3
  read_target_may_equal_positive: bool = True  # reference behaviour (METHODS §2.2); False draws from the others
  negclip_random_caption: bool = False  # METHODS §1.5 "our NegCLIP" uses the first sentence
  # METHODS §1.2 step 6: True removes a word shared by both captions under every tag (old); the reference: tag by tag.
  clic_shared_words_across_tags: bool = False
  clic_exclude_nonword: bool = True  # tokens without a word character ("-") are no swap candidates (fix)
  read_overlapping_swaps: bool = False  # METHODS §2.2: True keeps the reference's garbling overlapping swaps
  # METHODS §1.2 step 3 / §1.4: CLIC, CLIP and NegCLIP images with transparency are resized with alpha (PIL
  # premultiplies: fully transparent pixels turn black) and alpha is dropped afterwards, as the CLIC reference and
  # open_clip's eval transform do; False drops alpha before resizing. READ always drops it first, as its reference's
  # collator does (`convert("RGB")` before the CLIPProcessor).
  alpha_premultiplied_resize: bool = True


def analyses(rec: dict, idx: Sequence[int], tagger: Tagger | None) -> list[Analysis]:
  """The analysis of the record's sentences `idx`: from the prepared cache when present, else from the tagger."""
  if rec.get("analysis"):
    return [a if isinstance(a, Analysis) else Analysis.from_json(a) for a in (rec["analysis"][i] for i in idx)]
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


def eval_image(rec: dict, size: int, premultiplied_alpha: bool = True) -> np.ndarray:
  """The model's eval transform without normalisation: shorter side → size (bicubic), centre crop. uint8.
  `premultiplied_alpha`: see `SampleOptions.alpha_premultiplied_resize` (a prepared image is already resized)."""
  if "full" in rec:
    return decode_rgb(rec["full"])
  return Preprocess(size).resize_crop(rec["image"], premultiplied_alpha)


def _eval_image(rec: dict, opts: SampleOptions) -> np.ndarray:
  return eval_image(rec, opts.image_size, opts.alpha_premultiplied_resize)


def _two_extras(sentences: Sequence[str], rng: np.random.Generator) -> list[str]:
  extras = list(sentences[1:])
  if len(extras) >= 2:
    return [extras[k] for k in rng.choice(len(extras), size=2, replace=False)]
  return [extras[0], extras[0]]


def clic_sample(rec: dict, partner: dict, rng: np.random.Generator, tagger: Tagger | None,
                opts: SampleOptions = SampleOptions()) -> dict:
  """METHODS §1.2: concatenated image + [p1, p2, p3, p4, n]; `neg_valid` False when no negative could be made.

  → {"image": uint8 [S, S, 3], "texts": 5 strings, "neg_valid": bool, "neg_kind": str}
  """
  if not opts.clic_concat:
    return _clic_single_image(rec, rng, tagger, opts)
  a, b = rec["sentences"], partner["sentences"]
  alpha = opts.alpha_premultiplied_resize
  left, right = half_image(rec, opts.image_size, alpha), half_image(partner, opts.image_size, alpha)
  if rng.random() < 0.5:  # which image comes first is a coin flip; p1 always starts with i's caption
    left, right = right, left
  image = np.concatenate([left, right], axis=1 if left.shape[0] == opts.image_size else 0)
  ea, eb = _two_extras(a, rng), _two_extras(b, rng)
  p1, p2 = neg.join(a[0], b[0]), neg.join(b[0], a[0])
  p3 = neg.join(ea[0], eb[0]) if rng.random() < 0.5 else neg.join(eb[0], ea[0])
  p4 = neg.join(ea[1], eb[1]) if rng.random() < 0.5 else neg.join(eb[1], ea[1])
  (aa,), (ab,) = analyses(rec, [0], tagger), analyses(partner, [0], tagger)
  n, kind = neg.clic_negative(aa, ab, rng, shared_words_across_tags=opts.clic_shared_words_across_tags,
                              exclude_nonword=opts.clic_exclude_nonword)
  return {"image": image, "texts": [p1, p2, p3, p4, n or ""], "neg_valid": n is not None, "neg_kind": kind}


def _clic_single_image(rec, rng, tagger, opts):
  s = rec["sentences"]
  extras = _two_extras(s, rng)
  (a0,) = analyses(rec, [0], tagger)
  n = neg.single_swap(a0, rng, exclude_nonword=opts.clic_exclude_nonword)
  return {
      "image": _eval_image(rec, opts), "texts": [s[0], s[0], extras[0], extras[1], n or ""], "neg_valid": n is not None,
      "neg_kind": neg.SINGLE if n is not None else neg.NONE
  }


def clip_sample(rec: dict, opts: SampleOptions = SampleOptions()) -> dict:
  """CLIC's plain CLIP step (METHODS §1.4) and plain CLIP training: un-concatenated image, first sentence."""
  return {"image": _eval_image(rec, opts), "texts": [rec["sentences"][0]]}


def negclip_sample(rec: dict, rng: np.random.Generator, tagger: Tagger | None,
                   opts: SampleOptions = SampleOptions()) -> dict:
  """METHODS §1.5 "our NegCLIP": image, a caption (first by default), its single-sentence swap negative."""
  k = int(rng.integers(len(rec["sentences"]))) if opts.negclip_random_caption else 0
  (a,) = analyses(rec, [k], tagger)
  n = neg.single_swap(a, rng)
  return {
      "image": _eval_image(rec, opts), "texts": [rec["sentences"][k], n or ""], "neg_valid": n is not None,
      "neg_kind": neg.SINGLE if n is not None else neg.NONE
  }


def read_sample(rec: dict, rng: np.random.Generator, tagger: Tagger | None,
                opts: SampleOptions = SampleOptions()) -> dict:
  """METHODS §2.2: positive T, 3 rule-based negatives of T (masked when empty), paraphrase T', target y.

  → {"image", "texts": [T, n1, n2, n3], "neg_valid": bool [3], "paraphrase": str, "target": str}
  """
  caps = rec["sentences"]
  t = int(rng.integers(len(caps)))
  others = [k for k in range(len(caps)) if caps[k] != caps[t]]
  if opts.read_target_may_equal_positive or not others:
    y = int(rng.integers(len(caps)))
  else:
    y = others[rng.integers(len(others))]
  paras = rec.get("paraphrases") or []
  if paras:
    para = paras[rng.integers(len(paras))]
  else:  # the fallback that actually ran in the reference: another distinct caption of the same image
    para = caps[others[rng.integers(len(others))]] if others else caps[t]
  (a,) = analyses(rec, [t], tagger)
  made = [neg.read_negative(a, rng, allow_overlap=opts.read_overlapping_swaps) for _ in range(opts.read_num_negatives)]
  negs, kinds = [n for n, _ in made], [k for _, k in made]
  # READ's reference converts to RGB before its processor resizes: alpha dropped first, whatever the switch says
  return {
      "image": eval_image(rec, opts.image_size, False), "texts": [caps[t]] + [n or "" for n in negs],
      "neg_valid": np.array([n is not None for n in negs]), "paraphrase": para, "target": caps[y], "neg_kind": kinds
  }  # one kind per negative
