"""CLIC's hard negative (METHODS §1.2 step 6): the cross-caption swap of the two images' first sentences, with our
fallback (a single-sentence swap) and masking.

Its random choices are written once, as a walk over a choice tree (`_clic_walk`): `clic_negative` walks it with an
np.random.Generator, `clic_negative_distribution` enumerates every branch with its exact probability.
"""
from __future__ import annotations

import numpy as np

from compclip_jax.data.negatives import NONE, Analysis, Draw, distribution, eligible_words, pair_order, replace_word, \
    single_walk

# How a negative was made; the pipeline counts these (`neg/<kind>`).
CROSS, FALLBACK_SINGLE = "cross_swap", "fallback_single_swap"


def cross_candidates(a: Analysis, b: Analysis, *, shared_words_across_tags: bool = False,
                     exclude_nonword: bool = True) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
  """(common tags sorted, a's words per tag, b's words per tag) of CLIC's cross swap (METHODS §1.2 step 6).

  Words present in both sentences are removed tag by tag, as the reference does (a word that is a NOUN in one
  sentence and an ADJ in the other stays); `shared_words_across_tags` removes a shared word under every tag.
  """
  ga, gb = eligible_words(a, exclude_nonword), eligible_words(b, exclude_nonword)
  if shared_words_across_tags:
    shared = {w for ws in ga.values() for w in ws} & {w for ws in gb.values() for w in ws}
    ga = {p: [w for w in ws if w not in shared] for p, ws in ga.items()}
    gb = {p: [w for w in ws if w not in shared] for p, ws in gb.items()}
  else:
    shared = {p: set(ws) & set(gb.get(p, ())) for p, ws in ga.items()}
    ga = {p: [w for w in ws if w not in shared[p]] for p, ws in ga.items()}
    gb = {p: [w for w in ws if w not in shared.get(p, ())] for p, ws in gb.items()}
  return sorted(p for p in ga if ga[p] and gb.get(p)), ga, gb


def _clic_walk(a: Analysis, b: Analysis, choices, shared_words_across_tags: bool,
               exclude_nonword: bool) -> tuple[str | None, str]:
  common, ga, gb = cross_candidates(a, b, shared_words_across_tags=shared_words_across_tags,
                                    exclude_nonword=exclude_nonword)
  ta, tb = a.text(), b.text()
  if common:
    tag = common[choices.index(len(common))]
    w1, w2 = ga[tag][choices.index(len(ga[tag]))], gb[tag][choices.index(len(gb[tag]))]
    ea, eb = replace_word(ta, w1, w2), replace_word(tb, w2, w1)
    # Swapping the only content of two one-word captions ("cat" / "dog") just reorders the positives: not a negative.
    if sorted([ea, eb]) != sorted([ta, tb]):
      return pair_order(ea, eb, choices), CROSS
  for first in ((a, b) if choices.coin() else (b, a)):
    swapped = single_walk(first, choices, exclude_nonword)
    if swapped is not None:
      other = tb if first is a else ta
      return pair_order(swapped, other, choices), FALLBACK_SINGLE
  return None, NONE


def clic_negative(a: Analysis, b: Analysis, rng: np.random.Generator, *, shared_words_across_tags: bool = False,
                  exclude_nonword: bool = True) -> tuple[str | None, str]:
  """METHODS §1.2 step 6 on the first sentences of the two images → (negative text or None, kind).

  Cross swap: a common POS tag (uniform) among those left after removing, tag by tag, the words present in both
  sentences (`cross_candidates`); w1 from a and w2 from b (uniform) trade places (every whole-word occurrence); the
  two edited sentences are joined in random order. A swap that only reorders the two sentences is no negative.
  Fallback (ours, not the reference's garbling one): a single-sentence swap in a or b (random order of trying),
  joined with the other sentence in random order. None (masked) when neither is possible.
  """
  return _clic_walk(a, b, Draw(rng), shared_words_across_tags, exclude_nonword)


def clic_negative_distribution(a: Analysis, b: Analysis, *, shared_words_across_tags: bool = False,
                               exclude_nonword: bool = True) -> dict[tuple[str | None, str], float]:
  """The exact distribution of `clic_negative(a, b, rng, …)`: (negative or None, kind) → probability, from every
  random choice it makes (tag, words, join order, fallback order and swaps). Sums to 1."""
  return distribution(lambda choices: _clic_walk(a, b, choices, shared_words_across_tags, exclude_nonword))
