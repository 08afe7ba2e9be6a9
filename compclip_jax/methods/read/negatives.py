"""READ's rule-based negatives (METHODS §2.2): two members of one group — single nouns / adjectives / adverbs, noun
chunks of ≥ 3 tokens, verb phrases (every match, overlapping ones included) — trade places."""
from __future__ import annotations

import numpy as np

from compclip_jax.data.negatives import NONE, Analysis

# How a negative was made, per negative; the pipeline counts these (`neg/<kind>`): a rule swap; an overlapping
# verb-phrase swap was dropped (default) but another swap was kept; every kept swap overlapped so nothing is left
# (masked); a garbled negative kept (read.overlapping_swaps).
READ_RULE = "read_rule"
READ_OVERLAP_SKIPPED, READ_OVERLAP_NONE, READ_GARBLED = "read_overlap_skipped", "read_overlap_none", "read_garbled"
READ_ATTEMPTS = 5
READ_GROUPS = ("NOUN", "ADJ", "ADV", "chunk", "verb_phrase")  # the reference's group order


# ------------------------------------------------------------------------------------------------------- READ
def read_candidate_groups(a: Analysis) -> dict[str, list[tuple[int, int]]]:
  """METHODS §2.2: READ's swap groups as [start, end) token spans, the reference's members in its order — single
  NOUN, ADJ and ADV tokens, noun chunks of ≥ 3 tokens, verb phrases (every `VERB_PHRASE_PATTERN` match,
  overlapping ones included). Duplicated texts stay (the reference counts members, not distinct texts)."""
  groups = {p: [(i, i + 1) for i, q in enumerate(a.pos) if q == p] for p in READ_GROUPS[:3]}
  groups["chunk"] = [tuple(c) for c in a.chunks if c[1] - c[0] >= 3]
  groups["verb_phrase"] = [tuple(v) for v in a.verb_phrases]
  return groups


def spans_overlap(first: tuple[int, int], second: tuple[int, int]) -> bool:
  return first[0] < second[1] and second[0] < first[1]


def read_swap(a: Analysis, first: tuple[int, int], second: tuple[int, int], allow_overlap: bool) -> str | None:
  """The caption with two token spans exchanged, as the reference builds it: tokens spliced
  [:s1] + [s2:e2] + [e1:s2] + [s1:e1] + [e2:] (spans ordered by start) and joined with single spaces ("a horse
  riding a man ." — its negatives are always space-joined tokens). Overlapping spans duplicate words there ("two
  dogs playing are playing with a frisbee"): None unless `allow_overlap`, which returns that same string."""
  if second[0] < first[0]:
    first, second = second, first
  if spans_overlap(first, second) and not allow_overlap:
    return None
  (s1, e1), (s2, e2) = first, second
  t = list(a.tokens)
  return " ".join(t[:s1] + t[s2:e2] + t[e1:s2] + t[s1:e1] + t[e2:])


def read_negative(a: Analysis, rng: np.random.Generator, *, allow_overlap: bool = False) -> tuple[str | None, str]:
  """METHODS §2.2 → (negative or None, kind): up to 5 attempts, each swapping two members (uniform ordered pair) of
  a random group with ≥ 2 members; distinct new strings are kept and one of them (uniform) is returned.

  Overlapping members (verb phrases): the attempt is dropped unless `allow_overlap` (the reference keeps the garbled
  string). A swap that leaves the tokens as they were (two members with the same text) is no negative; the
  reference keeps it, re-spaced. Kinds: READ_RULE; READ_OVERLAP_SKIPPED (valid, but an overlapping attempt was
  dropped); READ_OVERLAP_NONE (None because of dropped overlapping attempts); READ_GARBLED (`allow_overlap`, the
  returned negative is garbled); NONE.
  """
  groups = [g for g in read_candidate_groups(a).values() if len(g) >= 2]
  if not groups:
    return None, NONE
  unchanged = {a.text(), " ".join(a.tokens)}
  kept, garbled, dropped = [], set(), 0
  for _ in range(READ_ATTEMPTS):
    g = groups[rng.integers(len(groups))]
    i, j = rng.choice(len(g), size=2, replace=False)
    overlap = spans_overlap(g[i], g[j])
    new = read_swap(a, g[i], g[j], allow_overlap)
    if new is None:
      dropped += 1
    elif new not in unchanged and new not in kept:
      kept.append(new)
      if overlap:
        garbled.add(new)
  if not kept:
    return None, READ_OVERLAP_NONE if dropped else NONE
  n = kept[rng.integers(len(kept))]
  return n, READ_GARBLED if n in garbled else READ_OVERLAP_SKIPPED if dropped else READ_RULE
