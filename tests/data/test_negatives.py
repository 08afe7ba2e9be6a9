"""Lexical-swap negatives (METHODS §1.2 step 6, §1.5, §2.2): hand-built analyses with hand-computed distributions,
real spaCy analyses checked by brute force, and sampling against the exact enumeration."""
import collections
import itertools

import numpy as np
import pytest
from PIL import Image

from compclip_jax.data import negatives as neg
from compclip_jax.data.negatives import Analysis, SpacyTagger
from compclip_jax.methods.clic import negatives as clic_neg
from compclip_jax.methods.read import negatives as read_neg
from compclip_jax.methods.read import samples as read_samples

CAPTIONS = [
    "a red shirt man on a gray horse", "two dogs playing with a yellow ball near the old fence",
    "a woman in a blue dress holds a small white cat", "three cars parked beside a tall green tree",
    "a child eating ice cream on a sunny beach", "the black bird sits above the wooden bench"
]


@pytest.fixture(scope="module")
def tagger():
  return SpacyTagger()


def A(text: str, pos: str, chunks=(), verb_phrases=()) -> Analysis:  # pylint: disable=invalid-name
  """A hand-made analysis: tokens split on spaces ("|" glues a token to the next one without a space)."""
  tokens, spaces = [], []
  for word in text.split(" "):
    parts = word.split("|")
    tokens += parts
    spaces += [False] * (len(parts) - 1) + [True]
  spaces[-1] = False
  tags = pos.split()
  assert len(tags) == len(tokens), (tokens, tags)
  return Analysis(tuple(tokens), tuple(tags), tuple(spaces), tuple(chunks), tuple(verb_phrases))


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


# ------------------------------------------------------------------------------------------------- spaCy tagger
def test_tagger_runs_the_full_pipeline(tagger):
  ident = tagger.identity()
  assert ident.startswith("spacy 3.") and "en_core_web_sm" in ident and neg.pos_pipeline_has_parser(ident)
  assert not neg.pos_pipeline_has_parser("spacy 3.8.18 / en_core_web_sm 3.8.0 / tok2vec+tagger+attribute_ruler")
  assert "ner" not in ident.rsplit(" / ", 1)[1].split("+")
  # Parser-dependent coarse tags (the attribute ruler reads the parse; real SugarCrepe captions): the parser-off
  # pipeline tags these "has" / "is" AUX and "This" DET.
  a, b, c = tagger([
      "A cat has its front paws on a toilet seat.", "There is a platter with a salad on white linen.",
      "This is an advanced toilet with a sink and control panel."
  ])
  assert a.pos[a.tokens.index("has")] == "VERB" and b.pos[b.tokens.index("is")] == "VERB" and c.pos[0] == "PRON"


# ------------------------------------------------------------------------------------------------------- CLIC
def test_cross_swap_is_exactly_one_same_pos_swap(tagger):
  rng = np.random.default_rng(0)
  kinds = []
  for x, y in itertools.permutations(CAPTIONS, 2):
    a, b = tagger([x, y])
    n, kind = clic_neg.clic_negative(a, b, rng)
    kinds.append(kind)
    assert kind == clic_neg.CROSS and _one_cross_swap(a, b, n), (x, y, n)
    assert n != neg.join(x, y) and n != neg.join(y, x)
  assert len(kinds) == 30


def test_shared_words_never_swap(tagger):
  a, b = tagger(["a red cube on a red table", "a red ball on a blue table"])
  rng = np.random.default_rng(1)
  for _ in range(50):
    n, _ = clic_neg.clic_negative(a, b, rng)
    assert "red" in n and "table" in n.split(". ")[0] + n.split(". ")[1]  # shared words stay where they were


def test_shared_words_removed_tag_by_tag():
  """"red" is an ADJ in a and a NOUN in b: the reference removes shared words per tag, so b's NOUN "red" stays a
  candidate; across tags (the old rule, a switch) it is removed."""
  a = A("a red cat", "DET ADJ NOUN")
  b = A("the red of a dog", "DET NOUN ADP DET NOUN")
  assert clic_neg.cross_candidates(a, b) == (["NOUN"], {"ADJ": ["red"],
                                                        "NOUN": ["cat"]}, {"NOUN": ["red", "dog"], "ADP": ["of"]})
  # NOUN is the only common tag; w1 = cat; w2 = red or dog (1/2 each); join order 1/2.
  quarter = {("a red red. the cat of a dog.", clic_neg.CROSS): 0.25,
             ("the cat of a dog. a red red.", clic_neg.CROSS): 0.25,
             ("a red dog. the red of a cat.", clic_neg.CROSS): 0.25,
             ("the red of a cat. a red dog.", clic_neg.CROSS): 0.25}
  assert clic_neg.clic_negative_distribution(a, b) == pytest.approx(quarter)
  half = {("a red dog. the red of a cat.", clic_neg.CROSS): 0.5, ("the red of a cat. a red dog.", clic_neg.CROSS): 0.5}
  assert clic_neg.clic_negative_distribution(a, b, shared_words_across_tags=True) == pytest.approx(half)
  # Same tag on both sides: removed either way.
  c = A("a red dog", "DET ADJ NOUN")
  assert clic_neg.cross_candidates(a, c)[0] == ["NOUN"] and clic_neg.cross_candidates(a, c)[1]["ADJ"] == []


def test_non_word_tokens_are_no_candidates():
  """spaCy splits "semi-smile" into semi / - / smile; "-" (tagged NOUN) cannot be replaced as a whole word, so the
  old rule made a one-sided "cross swap" (b changed, a not) a third of the time."""
  a = A("a semi|-|smile man", "DET ADJ NOUN NOUN NOUN")
  b = A("a dog", "DET NOUN")
  assert a.text() == "a semi-smile man"
  dist = clic_neg.clic_negative_distribution(a, b)
  assert dist == pytest.approx({("a semi-dog man. a smile.", clic_neg.CROSS): 0.25,
                                ("a smile. a semi-dog man.", clic_neg.CROSS): 0.25,
                                ("a semi-smile dog. a man.", clic_neg.CROSS): 0.25,
                                ("a man. a semi-smile dog.", clic_neg.CROSS): 0.25})
  old = clic_neg.clic_negative_distribution(a, b, exclude_nonword=False)
  one_sided = {k: p for k, p in old.items() if "a semi-smile man." in k[0]}
  assert one_sided == pytest.approx({("a semi-smile man. a -.", clic_neg.CROSS): 1 / 6,
                                     ("a -. a semi-smile man.", clic_neg.CROSS): 1 / 6})
  assert neg.eligible_words(a) == {"ADJ": ["semi"], "NOUN": ["smile", "man"]}
  assert neg.eligible_words(a, exclude_nonword=False)["NOUN"] == ["-", "smile", "man"]


@pytest.mark.parametrize(
    "a,b,want",
    [
        # identical captions: nothing left to cross-swap; the fallback swaps big/red inside either sentence (the same
        # string both ways) and joins it with the other in random order
        (A("a big red cat", "DET ADJ ADJ NOUN"), A(
            "a big red cat", "DET ADJ ADJ NOUN"), {("a red big cat. a big red cat.", clic_neg.FALLBACK_SINGLE): 0.5,
                                                   ("a big red cat. a red big cat.", clic_neg.FALLBACK_SINGLE): 0.5}),
        # no common tag; b cannot swap inside itself, so whichever is tried first the swap is a's
        (A("big red", "ADJ ADJ"), A("running", "VERB"), {("red big. running.", clic_neg.FALLBACK_SINGLE): 0.5,
                                                         ("running. red big.", clic_neg.FALLBACK_SINGLE): 0.5}),
        # one-word captions: the cross swap only reorders them, nothing to swap inside → masked
        (A("cat", "NOUN"), A("dog", "NOUN"), {(None, neg.NONE): 1.0}),
        (A("!!!", "PUNCT"), A("...", "PUNCT"), {(None, neg.NONE): 1.0}),
    ])
def test_distribution_hand_cases(a, b, want):
  assert clic_neg.clic_negative_distribution(a, b) == pytest.approx(want)


def test_distribution_mixes_cross_and_fallback():
  """Two common tags; the NOUN swap cannot find its words ("cat" inside "cats" is no whole word: both sentences stay
  as they were), so that branch falls back (and fails: nothing swaps inside either), the ADJ branch is a swap."""
  a, b = A("cat|s red", "NOUN NOUN ADJ"), A("dog|s blue", "NOUN NOUN ADJ")
  assert clic_neg.cross_candidates(a, b)[0] == ["ADJ", "NOUN"]  # "s" is shared under NOUN: removed
  assert clic_neg.clic_negative_distribution(a, b) == pytest.approx({("cats blue. dogs red.", clic_neg.CROSS): 0.25,
                                                                     ("dogs red. cats blue.", clic_neg.CROSS): 0.25,
                                                                     (None, neg.NONE): 0.5})


def _check_sampling(a, b, draws=20000, **kw):
  dist = clic_neg.clic_negative_distribution(a, b, **kw)
  assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
  rng = np.random.default_rng(123)
  counts = collections.Counter(clic_neg.clic_negative(a, b, rng, **kw) for _ in range(draws))
  assert set(counts) <= set(dist), set(counts) - set(dist)  # every sampled outcome is in the support
  for outcome, p in dist.items():
    f = counts[outcome] / draws
    assert abs(f - p) <= 5 * np.sqrt(p * (1 - p) / draws) + 1e-3, (outcome, f, p)
  return dist


def test_sampling_matches_the_exact_distribution(tagger):
  a, b = tagger(["a woman in a blue dress holds a small white cat", "two dogs playing with a yellow ball"])
  dist = _check_sampling(a, b)
  assert len(dist) > 20 and {k for _, k in dist} == {clic_neg.CROSS}
  fb = A("a big red cat near the old tree", "DET ADJ ADJ NOUN ADP DET ADJ NOUN")
  dist = _check_sampling(fb, fb)  # fallback only: both sentences, both word pairs, both orders
  assert {k for _, k in dist} == {clic_neg.FALLBACK_SINGLE} and len(dist) == 2 * 4
  a = A("a semi|-|smile man", "DET ADJ NOUN NOUN NOUN")
  _check_sampling(a, A("a dog", "DET NOUN"), draws=5000, exclude_nonword=False)


def test_adversarial_captions(tagger):
  for x, y, kind in [("!!!", "...", neg.NONE), ("a cat", "a cat", neg.NONE), ("cat", "dog", neg.NONE),
                     ("a cat", "a dog", neg.NONE), ("a big red cat", "a big red cat", clic_neg.FALLBACK_SINGLE),
                     ("running", "a cat", neg.NONE)]:
    a, b = tagger([x, y])
    n, got = clic_neg.clic_negative(a, b, np.random.default_rng(0))
    assert got == kind, (x, y)
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


# ------------------------------------------------------------------------------------------------------- READ
def test_verb_phrases_are_all_matcher_spans(tagger):
  """[VERB? ADV* AUX* VERB+], every match, overlapping ones included, in spaCy's order (tags checked first)."""
  (a,) = tagger(["a woman sitting holding an umbrella"])
  assert a.pos == ("DET", "NOUN", "VERB", "VERB", "DET", "NOUN")
  assert a.verb_phrases == ((2, 3), (2, 4), (3, 4))  # sitting, sitting holding, holding
  (b,) = tagger(["two dogs are playing with a frisbee"])
  assert b.pos[2:4] == ("AUX", "VERB")
  assert b.verb_phrases == ((2, 4), (3, 4))  # are playing, playing
  (c,) = tagger(["a man is quickly running and jumping over hurdles"])
  assert c.pos[2:7] == ("AUX", "ADV", "VERB", "CCONJ", "VERB")
  assert c.verb_phrases == ((3, 5), (4, 5), (6, 7))  # quickly running, running, jumping ("is" AUX precedes ADV)


def test_read_candidate_groups():
  a = A("a big dog and a small dog run quickly home .", "DET ADJ NOUN CCONJ DET ADJ NOUN VERB ADV ADV PUNCT",
        chunks=[(0, 3), (4, 7), (9, 10)], verb_phrases=[(7, 8), (7, 9)])
  groups = read_neg.read_candidate_groups(a)
  assert list(groups) == ["NOUN", "ADJ", "ADV", "chunk", "verb_phrase"]
  assert groups == {
      "NOUN": [(2, 3), (6, 7)], "ADJ": [(1, 2), (5, 6)], "ADV": [(8, 9), (9, 10)], "chunk": [(0, 3), (4, 7)],
      "verb_phrase": [(7, 8), (7, 9)]
  }


def test_read_swap_is_the_references_token_splice():
  a = A("a man riding a horse|.", "DET NOUN VERB DET NOUN PUNCT")
  # the reference joins tokens with single spaces, so the full stop comes loose
  assert read_neg.read_swap(a, (1, 2), (4, 5), allow_overlap=False) == "a horse riding a man ."
  assert read_neg.read_swap(a, (4, 5), (1, 2), allow_overlap=False) == "a horse riding a man ."  # order-free
  b = A("two dogs are playing with a frisbee", "NUM NOUN AUX VERB ADP DET NOUN")
  assert read_neg.read_swap(b, (2, 4), (3, 4), allow_overlap=False) is None
  # the reference's garbling, reproduced: [:2] + [3:4] + [4:3] (empty) + [2:4] + [4:]
  assert read_neg.read_swap(b, (2, 4), (3, 4), allow_overlap=True) == "two dogs playing are playing with a frisbee"
  assert read_neg.read_swap(b, (3, 4), (2, 4), allow_overlap=True) == "two dogs playing are playing with a frisbee"
  c = A("a woman sitting holding an umbrella", "DET NOUN VERB VERB DET NOUN")
  # equal starts keep the drawn order: [:2] + [2:3] + [4:2] + [2:4] + [3:]  /  [:2] + [2:4] + [3:2] + [2:3] + [4:]
  assert read_neg.read_swap(c, (2, 4), (2, 3), True) == "a woman sitting sitting holding holding an umbrella"
  assert read_neg.read_swap(c, (2, 3), (2, 4), True) == "a woman sitting holding sitting an umbrella"
  assert read_neg.read_swap(c, (2, 3), (3, 4), False) == "a woman holding sitting an umbrella"  # adjacent: no overlap


def test_read_negative_overlap_switch():
  b = A("a dog is running", "DET NOUN AUX VERB", verb_phrases=[(2, 4), (3, 4)])  # the only group ≥ 2: overlapping
  rng = np.random.default_rng(0)
  assert {read_neg.read_negative(b, rng) for _ in range(20)} == {(None, read_neg.READ_OVERLAP_NONE)}
  assert {read_neg.read_negative(b, rng, allow_overlap=True) for _ in range(20)} == {("a dog running is running",
                                                                                      read_neg.READ_GARBLED)}
  c = A("a dog and a cat are running", "DET NOUN CCONJ DET NOUN AUX VERB", verb_phrases=[(5, 7), (6, 7)])
  outs = collections.Counter(read_neg.read_negative(c, rng) for _ in range(400))
  swapped = "a cat and a dog are running"
  assert set(outs) == {(swapped, read_neg.READ_RULE), (swapped, read_neg.READ_OVERLAP_SKIPPED),
                       (None, read_neg.READ_OVERLAP_NONE)}
  # each attempt picks NOUN or the verb phrases (1/2): no VP attempt in 5 (READ_RULE) and no NOUN attempt
  # (READ_OVERLAP_NONE) have probability 1/32 each, ≈ 12 of 400
  assert 2 <= outs[swapped, read_neg.READ_RULE] <= 35 and 2 <= outs[None, read_neg.READ_OVERLAP_NONE] <= 35
  garbling = collections.Counter(k for _, k in (read_neg.read_negative(c, rng, allow_overlap=True) for _ in range(400)))
  assert set(garbling) == {read_neg.READ_RULE, read_neg.READ_GARBLED}


def test_read_no_op_swaps_are_no_negatives():
  """Two members with the same text: the reference keeps the re-spaced original ("a dog near a dog ."), i.e. the
  positive itself; ours has no negative (an intended difference)."""
  a = A("a dog near a dog|.", "DET NOUN ADP DET NOUN PUNCT")
  assert read_neg.read_candidate_groups(a)["NOUN"] == [(1, 2), (4, 5)]  # duplicates are members
  assert read_neg.read_swap(a, (1, 2), (4, 5), False) == "a dog near a dog ."
  assert read_neg.read_negative(a, np.random.default_rng(0)) == (None, neg.NONE)


def test_read_negatives_swap_group_members(tagger):
  (a,) = tagger(["a woman in a blue dress holds a small white cat"])
  rng = np.random.default_rng(0)
  outs = {read_neg.read_negative(a, rng)[0] for _ in range(60)}
  assert None not in outs and a.text() not in outs and len(outs) >= 3
  for n in outs:  # a permutation of the same tokens
    assert sorted(n.split()) == sorted(a.tokens)
  (empty,) = tagger(["!!!"])
  assert read_neg.read_negative(empty, rng) == (None, neg.NONE)


def test_read_sample_counts_kinds_per_negative():
  a = A("a dog is running", "DET NOUN AUX VERB", verb_phrases=[(2, 4), (3, 4)])
  rec = {"id": "x", "sentences": ["a dog is running"], "analysis": [a.to_json()], "image": Image.new("RGB", (40, 40))}
  rng = np.random.default_rng(0)
  s = read_samples.sample(rec, rng, None, read_samples.Options(image_size=32))
  assert s["neg_kind"] == [read_neg.READ_OVERLAP_NONE] * 3 and not s["neg_valid"].any()
  s = read_samples.sample(rec, rng, None, read_samples.Options(image_size=32, overlapping_swaps=True))
  assert s["neg_kind"] == [read_neg.READ_GARBLED] * 3 and s["texts"][1:] == ["a dog running is running"] * 3


def test_analysis_json_round_trip(tagger):
  (a,) = tagger(["a man riding on a brown horse, next to the old barn."])
  assert Analysis.from_json(a.to_json()) == a
  assert a.text() == "a man riding on a brown horse, next to the old barn."
  assert a.chunks and a.verb_phrases
