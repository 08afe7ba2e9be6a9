"""The demo's diagnostics: what a CLIP's embeddings carry (`diagnose`: probes and the bag-of-words gap) and what
CLIC's hard negatives change on the world's captions (`clic_negative_kinds`)."""
from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np

from compclip_jax.data import synthetic

# ------------------------------------------------------------------------------------------------- diagnostics
GAP_ROWS = (("attributes", "replace_att", "swap_att"), ("objects", "replace_obj", "swap_obj"))


def diagnose(clip_dir: str, workdir: str, seed: int = 0, n_benchmark: int = 300) -> dict:
  """What the CLIP of HF directory `clip_dir` carries (docs/demo.md "Diagnostics"): the bag and binding probes on
  its frozen image and text embeddings (demo/probe.py; scenes cached in `<workdir>/probe`) and its bag-of-words gap
  (replace − swap, attributes and objects) on the held-out benchmarks of `seed` (`<workdir>/world/benchmarks`, the
  fine-tuning's files). Writes `<workdir>/diagnose.{json,md}`; returns the record."""
  from compclip_jax.demo import probe as demo_probe  # pylint: disable=import-outside-toplevel
  from compclip_jax.weights import loading
  from compclip_jax.evaluators import run as evaluators  # pylint: disable=import-outside-toplevel
  from compclip_jax.evaluators.encoding import Encoder  # pylint: disable=import-outside-toplevel
  from compclip_jax.evaluators.tasks import ImageRef  # pylint: disable=import-outside-toplevel
  model, tok, pre = loading.load_clip(clip_dir)
  enc = Encoder(model, tok, pre, batch_size=256, progress=False)
  probes = demo_probe.probes(lambda paths: enc.images([ImageRef(p) for p in paths]), enc.texts,
                             os.path.join(workdir, "probe"))
  dirs = synthetic.write_benchmarks(os.path.join(workdir, "world", "benchmarks"), n_benchmark,
                                    seed + evaluators.SYNTHETIC_SEED_OFFSET)
  sc = evaluators.run_benchmarks(enc, ["sugarcrepe"], dirs["data_dir"], dirs["image_dir"])["sugarcrepe"]["metrics"]
  gaps = {k: sc[k] for _, *ks in GAP_ROWS for k in ks}
  record = {"model": clip_dir, "seed": seed, "probes": probes, "sugarcrepe": gaps}
  lines = ["| diagnostic (held-out scenes, %) | image embeddings | text embeddings | chance |", "|---|---|---|---|"]
  for key, label in (("binding", "binding probe: own bindings above their swap (two shapes)"),
                     ("place", "place probe: which colour is where (two objects of one shape)"),
                     ("bag", "bag probe: which colours and shapes (per label)")):
    chance = probes["image"][f"{key}_chance"]
    lines.append(f"| {label} | {100 * probes['image'][key]:.1f} | {100 * probes['text'][key]:.1f} | "
                 f"{100 * chance:.1f} |")
  lines += ["", "| SugarCrepe (held-out, %) | replace | swap | gap |", "|---|---|---|---|"]
  for label, rep_, swap in GAP_ROWS:
    lines.append(f"| {label} | {100 * sc[rep_]:.1f} | {100 * sc[swap]:.1f} | {100 * (sc[rep_] - sc[swap]):+.1f} |")
  text = "\n".join(lines)
  print(text, flush=True)
  with open(os.path.join(workdir, "diagnose.md"), "w") as f:
    f.write(text + "\n")
  with open(os.path.join(workdir, "diagnose.json"), "w") as f:
    json.dump(record, f, indent=2)
  return record


RELATION_WORDS = frozenset(w for r in synthetic.RELATIONS for w in r.split()) - {"the"}


def _word_kind(word: str) -> str:
  for kind, vocab in (("colour", synthetic.COLORS), ("shape", synthetic.SHAPES), ("size", synthetic.SIZES),
                      ("relation", RELATION_WORDS)):
    if word in vocab:
      return kind
  return "other"


def _moved_word(sentence: str, negative: str) -> str | None:
  """The word of `sentence` that a cross swap replaced, read off whichever of the negative's two sentences it
  became (the one differing from it in the fewest words); None if neither differs (no word of it moved)."""
  words = Counter(sentence.rstrip(".").split())
  lost = [words - Counter(part.rstrip(".").split()) for part in negative.split(". ")]
  best = min(lost, key=lambda d: sum(d.values()))
  return next(iter(best), None)


def clic_negative_kinds(csv_path: str, n: int = 3000, seed: int = 0) -> dict[str, int]:
  """CLIC's hard negatives (METHODS §1.2 step 6) on n random pairs of a synthetic world's main captions, counted by
  the kind of word the cross swap moved between the two sentences (colour, shape, size, relation, other), or
  "within one sentence" (the fallback single swap), or "none" (no negative; masked)."""
  from compclip_jax.data import negatives  # pylint: disable=import-outside-toplevel
  from compclip_jax.methods.clic import negatives as clic_negatives  # pylint: disable=import-outside-toplevel
  from compclip_jax.data.sources import CsvSource  # pylint: disable=import-outside-toplevel
  src = CsvSource(csv_path, image_root="")  # the captions as training reads them (cleaned, lower-cased)
  firsts = [sentences[0] for _, sentences in src.rows]
  analyses = negatives.SpacyTagger()(firsts)
  rng = np.random.default_rng(seed)
  counts: Counter = Counter()
  for _ in range(n):
    i, j = (int(k) for k in rng.integers(len(firsts), size=2))
    negative, how = clic_negatives.clic_negative(analyses[i], analyses[j], rng)
    if negative is None or how != clic_negatives.CROSS:
      kind = "none" if negative is None else "within one sentence"
    else:
      moved = _moved_word(analyses[i].text(), negative)
      kind = "other" if moved is None else _word_kind(moved)
    counts[kind] += 1
  return dict(counts)
