"""The SentencePiece model of the demo's random T5 decoder, trained on every sentence the synthetic world writes
(`compclip_jax/assets/synthetic_spiece.model`, made by `python -m compclip_jax synthetic --t5_tokenizer=...`)."""
from __future__ import annotations

import os

import numpy as np

from compclip_jax.data.synthetic.scenes import captions, held_out_pairings, phrasings, scene
from compclip_jax.data.synthetic.benchmarks import benchmark_rows


def vocabulary_corpus(n: int = 2000, seed: int = 0) -> list[str]:
  """Every kind of sentence the world writes (captions, extra sentences, paraphrases, benchmark captions and their
  negatives) over n training and n benchmark scenes: its vocabulary is fixed (COLORS, SHAPES, SIZES, RELATIONS and
  the templates of `phrasings`, `captions`, `benchmark_rows`), so this covers any world of any size and seed."""
  rng = np.random.default_rng(seed)
  held = held_out_pairings()
  out = []
  for benchmark in (False, True):
    for _ in range(n):
      sc = scene(rng, held, benchmark=benchmark)
      caps = captions(sc, rng)
      out += phrasings(sc) + caps["extra"]
      if benchmark:
        out += [t for row in benchmark_rows(sc, rng).values() for t in row.values()]
  return out


def train_t5_tokenizer(out: str, vocab_size: int = 200) -> str:
  """Trains the SentencePiece model of a random T5 decoder on `vocabulary_corpus()` → `out` (a .model path).

  The package ships its result as `compclip_jax/assets/synthetic_spiece.model` (T5's special ids: pad 0, eos 1, unk
  2; no bos), made by `python -m compclip_jax synthetic --t5_tokenizer=compclip_jax/assets/synthetic_spiece.model`."""
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  if not out.endswith(".model"):
    raise ValueError(f"{out}: the SentencePiece model path must end in .model")
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  # one thread and a fixed input order: the same pieces and scores on every rerun
  spm.SentencePieceTrainer.train(sentence_iterator=iter(vocabulary_corpus()), model_prefix=out[:-len(".model")],
                                 vocab_size=vocab_size, hard_vocab_limit=False, character_coverage=1.0, pad_id=0,
                                 eos_id=1, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2)
  os.remove(out[:-len(".model")] + ".vocab")  # the .model holds everything the tokenizer reads
  return out
