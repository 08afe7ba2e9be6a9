"""The demo's diagnostics: what a CLIP's embeddings carry (`diagnose`: probes and the bag-of-words gap) and what
CLIC's hard negatives change on the world's captions (`clic_negative_kinds`)."""
from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np

from compclip_jax.data.synthetic import scenes as synthetic
from compclip_jax.data.synthetic import benchmarks as synthetic_benchmarks

# ------------------------------------------------------------------------------------------------- diagnostics
GAP_ROWS = (("attributes", "replace_att", "swap_att"), ("objects", "replace_obj", "swap_obj"))

# The starting point's gate (docs/demo.md, "The gate"), fixed before any method runs on a world: the frozen vision
# tower binds colours to shapes on single images and on collage halves, the text tower is a bag of words. Collage
# halves are read against their ceiling (`probe.collage_ceiling`): a linear read-out of four bindings in one vector
# cannot reach the single-image figure even on an ideal tower, so an absolute threshold would test the probe, not
# the tower.
GATE = {
    "single_binding_min": 0.95,  # image binding probe, single images
    "collage_of_ceiling_min": 0.95,  # collage binding probe ÷ its superposition ceiling
    "text_binding_max": 0.60,  # text binding probe
    "gap_min": 0.20,  # replace − swap on the held-out SugarCrepe files, attributes and objects
}


def gate(probes: dict, gaps: dict) -> list[dict]:
  """The starting point's gate (`GATE`) on `probes` (demo/probe.py `probes`) and the held-out SugarCrepe `gaps`
  ({replace_att, swap_att, replace_obj, swap_obj}) → one row per rule: {"rule", "required", "measured", "met"}."""
  img, txt = probes["image"], probes["text"]
  ratio = img["collage_binding"] / img["collage_ceiling"]
  gap = {label: gaps[r] - gaps[s] for label, r, s in GAP_ROWS}
  pct = lambda v: f"{100 * v:.1f} %"
  return [
      {
          "rule": "vision binds on single images", "required": f"binding probe ≥ {pct(GATE['single_binding_min'])}",
          "measured": pct(img["binding"]), "met": bool(img["binding"] >= GATE["single_binding_min"])
      },
      {
          "rule": "vision binds on collage halves",
          "required": f"collage binding probe ≥ {pct(GATE['collage_of_ceiling_min'])} of its ceiling",
          "measured": f"{pct(img['collage_binding'])} of a ceiling of {pct(img['collage_ceiling'])}: {pct(ratio)}",
          "met": bool(ratio >= GATE["collage_of_ceiling_min"])
      },
      {
          "rule": "text tower a bag", "required": f"text binding probe ≤ {pct(GATE['text_binding_max'])}",
          "measured": pct(txt["binding"]), "met": bool(txt["binding"] <= GATE["text_binding_max"])
      },
      {
          "rule": "text tower a bag", "required": f"swap ≤ replace − {100 * GATE['gap_min']:.0f} on the held-out "
                                                  "SugarCrepe files",
          "measured": ", ".join(f"gap {100 * v:+.1f} ({k})" for k, v in gap.items()),
          "met": bool(min(gap.values()) >= GATE["gap_min"])
      },
  ]


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
  dirs = _benchmarks(workdir, seed, n_benchmark)
  sc = evaluators.run_benchmarks(enc, ["sugarcrepe"], dirs["data_dir"], dirs["image_dir"])["sugarcrepe"]["metrics"]
  gaps = {k: sc[k] for _, *ks in GAP_ROWS for k in ks}
  collage = collage_swap_accuracy(enc, dirs["data_dir"], dirs["image_dir"], ImageRef)
  rules = gate(probes, gaps)
  record = {
      "model": clip_dir, "seed": seed, "probes": probes, "sugarcrepe": gaps, "collage_swap": collage, "gate": rules
  }
  text = diagnose_text(record)
  print(text, flush=True)
  with open(os.path.join(workdir, "diagnose.md"), "w") as f:
    f.write(text + "\n")
  with open(os.path.join(workdir, "diagnose.json"), "w") as f:
    json.dump(record, f, indent=2)
  return record


def diagnose_text(record: dict) -> str:
  """The markdown of a `diagnose` record: the probes, the bag-of-words gap, the cross-collage swap test and the
  gate rule by rule (what `--diagnose` prints and writes to diagnose.md)."""
  img, txt, sc, rules = record["probes"]["image"], record["probes"]["text"], record["sugarcrepe"], record["gate"]
  lines = ["| diagnostic (held-out scenes, %) | image embeddings | text embeddings | chance |", "|---|---|---|---|"]
  lines.append(f"| collage binding probe: a held-out half's own bindings above their swap | "
               f"{100 * img['collage_binding']:.1f} | — | 50.0 |")
  lines.append(f"| its ceiling: the same probe on the normalised sum of the halves' own embeddings | "
               f"{100 * img['collage_ceiling']:.1f} | — | 50.0 |")
  for key, label in (("binding", "binding probe: own bindings above their swap (two shapes)"),
                     ("place", "place probe: which colour is where (two objects of one shape)"),
                     ("bag", "bag probe: which colours and shapes (per label)")):
    lines.append(f"| {label} | {100 * img[key]:.1f} | {100 * txt[key]:.1f} | {100 * img[f'{key}_chance']:.1f} |")
  lines += ["", "| SugarCrepe (held-out, %) | replace | swap | gap |", "|---|---|---|---|"]
  for label, rep_, swap in GAP_ROWS:
    lines.append(f"| {label} | {100 * sc[rep_]:.1f} | {100 * sc[swap]:.1f} | {100 * (sc[rep_] - sc[swap]):+.1f} |")
  lines += [
      "", f"Cross-collage swap test (CLIC's own task, held-out scenes; a diagnostic): "
      f"{100 * record['collage_swap']:.1f} % (chance 50)"
  ]
  lines += ["", "| the gate | required | measured | met |", "|---|---|---|---|"]
  lines += [f"| {r['rule']} | {r['required']} | {r['measured']} | {'yes' if r['met'] else '**no**'} |" for r in rules]
  lines += ["", f"The gate is {'met' if all(r['met'] for r in rules) else '**not met**'}."]
  return "\n".join(lines)


def collage_swap(clip_dir: str, workdir: str, seed: int, n_benchmark: int = 300) -> float:
  """The cross-collage swap test (`collage_swap_accuracy`) of the CLIP (or SigLIP) in HF directory `clip_dir` on the
  held-out benchmarks of `seed` in `<workdir>/world/benchmarks` (the fine-tuning's own files; written if absent)."""
  from compclip_jax.weights import loading  # pylint: disable=import-outside-toplevel
  from compclip_jax.evaluators.encoding import Encoder  # pylint: disable=import-outside-toplevel
  from compclip_jax.evaluators.tasks import ImageRef  # pylint: disable=import-outside-toplevel
  dirs = _benchmarks(workdir, seed, n_benchmark)
  enc = Encoder(*loading.load_clip(clip_dir), batch_size=256, progress=False)
  return collage_swap_accuracy(enc, dirs["data_dir"], dirs["image_dir"], ImageRef)


def _benchmarks(workdir: str, seed: int, n: int) -> dict:
  """The held-out benchmarks of `seed` in `<workdir>/world/benchmarks`, as fine-tuning writes them (written if
  absent) → write_benchmarks' {"data_dir", "image_dir", …}."""
  from compclip_jax.evaluators import run as evaluators  # pylint: disable=import-outside-toplevel
  return synthetic_benchmarks.write_benchmarks(os.path.join(workdir, "world", "benchmarks"), n,
                                               seed + evaluators.SYNTHETIC_SEED_OFFSET)


def collage_swap_accuracy(enc, data_dir: str, image_dir: str, image_ref) -> float:
  """The cross-collage swap test (synthetic_benchmarks.write_benchmarks' `collage/swap_att.json`): the share of
  collages whose caption scores above its cross-swapped negative (ties count wrong)."""
  with open(os.path.join(data_dir, "collage", "swap_att.json")) as f:
    rows = list(json.load(f).values())
  img = enc.images([image_ref(os.path.join(image_dir, r["filename"])) for r in rows])
  pos, neg = enc.texts([r["caption"] for r in rows]), enc.texts([r["negative_caption"] for r in rows])
  return float(np.mean(np.sum(img * pos, -1) > np.sum(img * neg, -1)))


def world_gate(world: str, n_pairs: int = 2000, seed: int = 0) -> dict:
  """The gate's rules 1–3 (docs/demo.md) measured on a written world (`<world>/clic_rows.csv`, `scenes.json`): the
  words of the first sentences and of the further sentences (min, max), further sentences per row (min, max), the
  swap-twin rate in batches of 32 (`swap_twin_rate`), and CLIC's negatives by kind (`clic_negative_kinds`, exact
  over n_pairs random pairs) with the share that trades two content words of one kind."""
  from compclip_jax.data.sources import CsvSource  # pylint: disable=import-outside-toplevel
  rows = [sentences for _, sentences in CsvSource(os.path.join(world, "clic_rows.csv"), image_root="").rows]
  with open(os.path.join(world, "scenes.json")) as f:
    scenes = json.load(f)
  words = lambda ss: [len(s.split()) for s in ss]
  kinds = clic_negative_kinds(os.path.join(world, "clic_rows.csv"), n_pairs, seed)
  return {
      "first_sentence_words": [min(words(r[0] for r in rows)),
                               max(words(r[0] for r in rows))],
      "extra_sentence_words": [min(words(s for r in rows for s in r[1:])),
                               max(words(s for r in rows for s in r[1:]))],
      "extra_sentences": [min(len(r) - 1 for r in rows), max(len(r) - 1 for r in rows)],
      "swap_twin_rate_batch32": swap_twin_rate(scenes, 32, seed), "clic_negatives": kinds,
      "same_kind_share": same_kind_share(kinds)
  }


def word_kind(word: str) -> str:
  """The kind of a word of the world's first sentences: colour, shape, size, relation, scene, or other (a function
  word)."""
  for kind, vocab in (("colour", synthetic.COLORS), ("shape", synthetic.SHAPES), ("size", synthetic.SIZES),
                      ("relation", synthetic.RELATIONS), ("scene", synthetic.SCENES)):
    if word in vocab:
      return kind
  return "other"


def traded_words(sentences: tuple[str, str], negative: str) -> tuple[str, str] | None:
  """The two words a swap traded, read off the negative: its two sentences against the originals in whichever
  order changes fewer words (the join order is a coin flip), → (the word the first changed sentence lost, the word
  it gained); None when no word moved."""
  parts = [p.rstrip(".").split() for p in negative.split(". ")]
  originals = [s.rstrip(".").split() for s in sentences]
  best = None
  for pa, pb in (parts, parts[::-1]):
    if len(pa) == len(originals[0]) and len(pb) == len(originals[1]):
      changed = [(x, y) for o, p in ((originals[0], pa), (originals[1], pb)) for x, y in zip(o, p) if x != y]
      if best is None or len(changed) < len(best):
        best = changed
  return best[0] if best else None


def clic_negative_kinds(csv_path: str, n: int = 2000, seed: int = 0) -> dict[str, float]:
  """What CLIC's hard negatives (METHODS §1.2 step 6) trade on n random pairs of a synthetic world's first
  sentences, as probabilities from the *exact* distribution of the reference's choices for each pair
  (`clic_negative_distribution`), averaged over the pairs: "<kind> ↔ <kind>" for the two words a cross swap traded
  between the sentences ("colour ↔ colour": a same-kind content swap), "within one sentence: …" for the fallback
  swap, "none" where no negative can be made (masked). Sums to 1."""
  from compclip_jax.data import negatives  # pylint: disable=import-outside-toplevel
  from compclip_jax.methods.clic import negatives as clic_negatives  # pylint: disable=import-outside-toplevel
  from compclip_jax.data.sources import CsvSource  # pylint: disable=import-outside-toplevel
  src = CsvSource(csv_path, image_root="")  # the captions as training reads them (cleaned, lower-cased)
  firsts = [sentences[0] for _, sentences in src.rows]
  analyses = negatives.SpacyTagger()(firsts)
  rng = np.random.default_rng(seed)
  out: Counter = Counter()
  for _ in range(n):
    i, j = (int(k) for k in rng.integers(len(firsts), size=2))
    dist = clic_negatives.clic_negative_distribution(analyses[i], analyses[j])
    for (negative, how), p in dist.items():
      if negative is None:
        out["none"] += p / n
        continue
      pair = (analyses[i].text(), analyses[j].text())
      moved = traded_words(pair, negative)
      kinds = " ↔ ".join(sorted(word_kind(w) for w in moved)) if moved else "nothing moved"
      out[kinds if how == clic_negatives.CROSS else f"within one sentence: {kinds}"] += p / n
  return dict(out)


def same_kind_share(kinds: dict[str, float]) -> float:
  """The share of negatives (masked ones left out) that trade two content words of the same kind."""
  made = {k: p for k, p in kinds.items() if k != "none"}
  same = sum(p for k, p in made.items()
             if k.split(": ")[-1] in {f"{x} ↔ {x}" for x in ("colour", "shape", "size", "relation", "scene")})
  return same / sum(made.values())


def swap_twin_rate(scenes: list[dict], batch: int = 32, seed: int = 0) -> float:
  """The share of images that find their exact colour-swapped twin in their own batch (random batches of `batch`
  without replacement, as the training pipeline draws them): another image with the same two shapes whose colours
  are exchanged ({(c2, s1), (c1, s2)} for {(c1, s1), (c2, s2)}; sizes, textures, places and scene free). Such a
  twin is a NegCLIP-like hard negative that plain contrastive fine-tuning gets for free (the gate's rule 2: < 1 %)."""
  binding = lambda objs: tuple(sorted((o[1], o[2]) for o in objs))
  keys = [binding(sc["objects"]) for sc in scenes]
  twins = [binding(synthetic.colours_exchanged(sc)["objects"]) for sc in scenes]
  order = np.random.default_rng(seed).permutation(len(scenes))
  found = 0
  for start in range(0, len(order) - batch + 1, batch):
    members = order[start:start + batch]
    present = Counter(keys[i] for i in members)
    found += sum(present[twins[i]] - (twins[i] == keys[i]) > 0 for i in members)  # not itself (one shape twice)
  return found / (len(order) // batch * batch)
