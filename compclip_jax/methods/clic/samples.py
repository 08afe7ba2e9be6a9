"""CLIC's sample (METHODS §1.2): a concatenated image pair and its five texts [p1, p2, p3, p4, n]; the single-image
ablation (METHODS §1.5, `clic.concat=False`). Pure: (record, partner, rng, tagger, options) → sample."""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from compclip_jax.data import negatives as neg
from compclip_jax.data.samples import ImageOptions, Tagger, analyses, half_image, model_image
from compclip_jax.methods.clic.negatives import clic_negative


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options(ImageOptions):
  """config.clic's sample switches (methods/clic/config.py says what each one does)."""
  concat: bool = True
  imagenet_normalization: bool = True
  shared_words_across_tags: bool = False
  exclude_nonword: bool = True


def _two_extras(sentences: Sequence[str], rng: np.random.Generator) -> list[str]:
  extras = list(sentences[1:])
  if len(extras) >= 2:
    return [extras[k] for k in rng.choice(len(extras), size=2, replace=False)]
  return [extras[0], extras[0]]


def sample(rec: dict, partner: dict, rng: np.random.Generator, tagger: Tagger | None,
           opts: Options = Options()) -> dict:
  """METHODS §1.2: concatenated image + [p1, p2, p3, p4, n]; `neg_valid` False when no negative could be made.

  → {"image": uint8 [S, S, 3], "texts": 5 strings, "neg_valid": bool, "neg_kind": str}
  """
  if not opts.concat:
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
  n, kind = clic_negative(aa, ab, rng, shared_words_across_tags=opts.shared_words_across_tags,
                          exclude_nonword=opts.exclude_nonword)
  return {"image": image, "texts": [p1, p2, p3, p4, n or ""], "neg_valid": n is not None, "neg_kind": kind}


def _clic_single_image(rec, rng, tagger, opts):
  s = rec["sentences"]
  extras = _two_extras(s, rng)
  (a0,) = analyses(rec, [0], tagger)
  n = neg.single_swap(a0, rng, exclude_nonword=opts.exclude_nonword)
  return {
      "image": model_image(rec, opts), "texts": [s[0], s[0], extras[0], extras[1], n or ""], "neg_valid": n is not None,
      "neg_kind": neg.SINGLE if n is not None else neg.NONE
  }
