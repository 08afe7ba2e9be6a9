"""READ's sample (METHODS §2.2): a caption T, its rule-based negatives, a paraphrase T' and the reconstruction
target y. Pure: (record, rng, tagger, options) → sample."""
from __future__ import annotations

import dataclasses

import numpy as np

from compclip_jax.data.samples import ImageOptions, Tagger, analyses, eval_image
from compclip_jax.methods.read.negatives import read_negative


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options(ImageOptions):
  """config.read's sample switches (methods/read/config.py says what each one does)."""
  num_negatives: int = 3
  target_may_equal_positive: bool = True
  overlapping_swaps: bool = False


def sample(rec: dict, rng: np.random.Generator, tagger: Tagger | None, opts: Options = Options()) -> dict:
  """METHODS §2.2: positive T, 3 rule-based negatives of T (masked when empty), paraphrase T', target y.

  → {"image", "texts": [T, n1, n2, n3], "neg_valid": bool [3], "paraphrase": str, "target": str}
  """
  caps = rec["sentences"]
  t = int(rng.integers(len(caps)))
  others = [k for k in range(len(caps)) if caps[k] != caps[t]]
  if opts.target_may_equal_positive or not others:
    y = int(rng.integers(len(caps)))
  else:
    y = others[rng.integers(len(others))]
  paras = rec.get("paraphrases") or []
  if paras:
    para = paras[rng.integers(len(paras))]
  else:  # the fallback that actually ran in the reference: another distinct caption of the same image
    para = caps[others[rng.integers(len(others))]] if others else caps[t]
  (a,) = analyses(rec, [t], tagger)
  made = [read_negative(a, rng, allow_overlap=opts.overlapping_swaps) for _ in range(opts.num_negatives)]
  negs, kinds = [n for n, _ in made], [k for _, k in made]
  # READ's reference converts to RGB before its processor resizes: alpha dropped first, whatever the switch says
  return {
      "image": eval_image(rec, opts.image_size, False, opts.squash), "texts": [caps[t]] + [n or "" for n in negs],
      "neg_valid": np.array([n is not None for n in negs]), "paraphrase": para, "target": caps[y], "neg_kind": kinds
  }  # one kind per negative
