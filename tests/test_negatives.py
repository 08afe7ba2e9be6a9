"""Lexical-swap negatives (METHODS §1.2 step 6, §1.5, §2.2) on real spaCy analyses, checked by brute force."""
import itertools

import numpy as np
import pytest

from compclip_jax.data import negatives as neg
from compclip_jax.data.negatives import Analysis, SpacyTagger

CAPTIONS = ["a red shirt man on a gray horse", "two dogs playing with a yellow ball near the old fence",
            "a woman in a blue dress holds a small white cat", "three cars parked beside a tall green tree",
            "a child eating ice cream on a sunny beach", "the black bird sits above the wooden bench"]


@pytest.fixture(scope="module")
def tagger():
  return SpacyTagger(parse=True)


def _sentences(text):
  parts = [p.strip() for p in text.split(".") if p.strip()]
  assert len(parts) == 2, text
  return parts


def _one_cross_swap(a: Analysis, b: Analysis, n: str) -> bool:
  """Is n = {a with w1→w2, b with w2→w1} for some same-POS eligible words w1 ∈ a, w2 ∈ b, w1 ≠ w2?"""
  target = sorted(_sentences(n))
  for (t1, p1), (t2, p2) in itertools.product(zip(a.tokens, a.pos), zip(b.tokens, b.pos)):
    if p1 == p2 and p1 not in neg.INELIGIBLE_POS and t1 != t2:
      if sorted([neg.replace_word(a.text(), t1, t2), neg.replace_word(b.text(), t2, t1)]) == target:
        return True
  return False


def test_cross_swap_is_exactly_one_same_pos_swap(tagger):
  rng = np.random.default_rng(0)
  kinds = []
  for x, y in itertools.permutations(CAPTIONS, 2):
    a, b = tagger([x, y])
    n, kind = neg.clic_negative(a, b, rng)
    kinds.append(kind)
    assert kind == neg.CROSS and _one_cross_swap(a, b, n), (x, y, n)
    assert n != neg.join(x, y) and n != neg.join(y, x)
  assert len(kinds) == 30


def test_shared_words_never_swap(tagger):
  a, b = tagger(["a red cube on a red table", "a red ball on a blue table"])
  rng = np.random.default_rng(1)
  for _ in range(50):
    n, _ = neg.clic_negative(a, b, rng)
    assert "red" in n and "table" in n.split(". ")[0] + n.split(". ")[1]  # shared words stay where they were


@pytest.mark.parametrize("x,y,kind", [
    ("!!!", "...", neg.NONE),                                      # punctuation only
    ("a cat", "a cat", neg.NONE),                                  # identical, one eligible word
    ("cat", "dog", neg.NONE),                                      # one-word captions: a swap only reorders them
    ("a cat", "a dog", neg.NONE),
    ("a big red cat", "a big red cat", neg.FALLBACK_SINGLE),       # identical: only a swap inside one sentence
    ("running", "a cat", neg.NONE),                                # no common tag, nothing to swap inside
])
def test_adversarial_captions(tagger, x, y, kind):
  a, b = tagger([x, y])
  n, got = neg.clic_negative(a, b, np.random.default_rng(0))
  assert got == kind
  assert (n is None) == (kind == neg.NONE)
  if n is not None:
    assert n not in (neg.join(x, y), neg.join(y, x))


def test_whole_word_replacement():
  assert neg.replace_word("a cat and a catalog, cat.", "cat", "dog") == "a dog and a catalog, dog."
  assert neg.swap_words("red shirt gray horse", "red", "gray") == "gray shirt red horse"
  assert neg.swap_words("a t-shirt and a hat", "t-shirt", "hat") == "a hat and a t-shirt"


def test_single_swap_swaps_two_words_of_one_pos(tagger):
  (a,) = tagger(["a red shirt man on a gray horse"])
  rng = np.random.default_rng(0)
  seen = set()
  for _ in range(40):
    n = neg.single_swap(a, rng)
    diff = [(u, v) for u, v in zip(a.text().split(), n.split()) if u != v]
    assert len(diff) == 2 and diff[0] == diff[1][::-1]
    seen.add(n)
  assert {"a gray shirt man on a red horse", "a red horse man on a gray shirt"} <= seen


def test_read_negatives_swap_group_members(tagger):
  (a,) = tagger(["a woman in a blue dress holds a small white cat"])
  rng = np.random.default_rng(0)
  outs = {neg.read_negative(a, rng) for _ in range(60)}
  assert None not in outs and a.text() not in outs and len(outs) >= 3
  for n in outs:  # a permutation of the same words
    assert sorted(n.split()) == sorted(a.text().split())
  (empty,) = tagger(["!!!"])
  assert neg.read_negative(empty, rng) is None


def test_analysis_json_round_trip(tagger):
  (a,) = tagger(["a man riding on a brown horse, next to the old barn."])
  assert Analysis.from_json(a.to_json()) == a
  assert a.text() == "a man riding on a brown horse, next to the old barn."
  assert a.chunks and a.verb_phrases
