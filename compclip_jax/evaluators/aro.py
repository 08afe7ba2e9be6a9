"""ARO (METHODS §3): VG-Relation and VG-Attribution on box crops ([false, true] captions), and COCO-/Flickr30k-Order
(the caption against 4 word-order perturbations).

Files: `<data_dir>/aro/visual_genome_relation.json`, `visual_genome_attribution.json` (records with `image_path`,
`bbox_x/y/w/h`, `true_caption`, `false_caption`, `relation_name` or `attributes`), and for the order sets
`coco_karpathy_test.json` / `flickr30k_test.json`. The order negatives are generated once per seed with spaCy and
written to `<cache_dir>/<set>_order.seed<seed>.json`, so every later run scores the same negatives.
Aggregation, labelled: VG-R is the macro mean over relations outside ARO's list of symmetric relations; VG-A the
macro mean over attribute pairs with ≥ 25 examples; the order sets are micro (plain) precision@1.
"""
from __future__ import annotations

import json
import os

import numpy as np

from compclip_jax.errors import InputError
from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.captions import pre_caption, read_test_captions
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path, read_json

# Relations ARO's evaluation leaves out of the VG-Relation macro mean (swapping their arguments need not be false).
VGR_EXCLUDED = frozenset("""adjusting|attached to|between|bigger than|biting|boarding|brushing|chewing|cleaning|
climbing|close to|coming from|coming out of|contain|crossing|dragging|draped over|drinking|drinking from|driving|
driving down|driving on|eating from|eating in|enclosing|exiting|facing|filled with|floating in|floating on|flying|
flying above|flying in|flying over|flying through|full of|going down|going into|going through|grazing in|growing in|
growing on|guiding|hanging from|hanging in|hanging off|hanging over|higher than|holding onto|hugging|in between|
jumping off|jumping on|jumping over|kept in|larger than|leading|leaning over|leaving|licking|longer than|looking in|
looking into|looking out|looking over|looking through|lying next to|lying on top of|making|mixed with|mounted on|
moving|on the back of|on the edge of|on the front of|on the other side of|opening|painted on|parked at|
parked beside|parked by|parked in|parked in front of|parked near|parked next to|perched on|petting|piled on|playing|
playing in|playing on|playing with|pouring|reaching for|reading|reflected on|riding on|running in|running on|
running through|seen through|sitting behind|sitting beside|sitting by|sitting in front of|sitting near|
sitting next to|sitting under|skiing down|skiing on|sleeping in|sleeping on|smiling at|sniffing|splashing|
sprinkled on|stacked on|standing against|standing around|standing behind|standing beside|standing in front of|
standing near|standing next to|staring at|stuck in|surrounding|swimming in|swinging|talking to|topped with|touching|
traveling down|traveling on|tying|typing on|underneath|wading in|waiting for|walking across|walking by|walking down|
walking next to|walking through|working in|working on|worn on|wrapped around|wrapped in|by|of|near|next to|with|
beside|on the side of|around""".replace("\n", "").split("|"))
VGA_MIN_COUNT = 25


def _load_vg(data_dir, image_dir, file, group_of, name, min_count, excluded=frozenset()):
  images, texts = Index(), Index()
  rows = []  # (image, false caption, true caption, group): one list, so skipping an image keeps them aligned
  for r in read_json(os.path.join(data_dir, "aro", file)):
    box = (r["bbox_x"], r["bbox_y"], r["bbox_w"], r["bbox_h"])
    in_images = os.path.join(image_dir, "aro", "images", r["image_path"])  # ARO's own layout, else the usual lookup
    path = in_images if os.path.exists(in_images) else image_path(image_dir, "aro", r["image_path"])
    rows.append((images.add(ImageRef(path,
                                     box)), texts.add(r["false_caption"]), texts.add(r["true_caption"]), group_of(r)))

  def score(img, txt, tie):
    i, f, t = (np.array(x) for x in list(zip(*rows))[:3])
    groups = [r[3] for r in rows]
    ok = scorers.pair_correct(np.sum(img[i] * txt[t], -1), np.sum(img[i] * txt[f], -1), tie)
    per = {}
    for g in sorted(set(groups)):
      mask = np.array([x == g for x in groups])
      if mask.sum() >= min_count and g not in excluded:
        per[g] = float(ok[mask].mean())
    return {
        "macro_accuracy": scorers.mean(per.values()), "micro_accuracy": float(ok.mean()), "groups": len(per),
        "count": len(rows)
    }

  return Task(name, images, texts, score, examples=(rows,))


def load_vg_relation(data_dir: str, image_dir: str) -> Task:
  return _load_vg(data_dir, image_dir, "visual_genome_relation.json", lambda r: r["relation_name"], "vg_relation", 1,
                  VGR_EXCLUDED)


def load_vg_attribution(data_dir: str, image_dir: str) -> Task:
  return _load_vg(data_dir, image_dir, "visual_genome_attribution.json",
                  lambda r: f"{r['attributes'][0]}_{r['attributes'][1]}", "vg_attribution", VGA_MIN_COUNT)


# ------------------------------------------------------------------------------------------------ order sets
def _shuffle_nouns_adj(tok, pos, rng):
  idx = [k for k, p in enumerate(pos) if p in ("NOUN", "ADJ")]
  return _permute(tok, idx, rng)


def _shuffle_all_but_nouns_adj(tok, pos, rng):
  idx = [k for k, p in enumerate(pos) if p not in ("NOUN", "ADJ")]
  return _permute(tok, idx, rng)


def _permute(tok, idx, rng):
  out = list(tok)
  for src, dst in zip(idx, rng.permutation(idx)):
    out[dst] = tok[src]
  return out


def _trigrams(tok):
  return [tok[k:k + 3] for k in range(0, len(tok), 3)]


def _shuffle_within_trigrams(tok, pos, rng):
  return [w for tri in _trigrams(tok) for w in rng.permutation(tri)]


def _shuffle_trigrams(tok, pos, rng):
  tris = _trigrams(tok)
  return [w for k in rng.permutation(len(tris)) for w in tris[k]]


PERTURBATIONS = (_shuffle_nouns_adj, _shuffle_all_but_nouns_adj, _shuffle_within_trigrams, _shuffle_trigrams)


def order_options(captions: list[str], seed: int) -> list[list[str]]:
  """[caption, 4 perturbations] per caption (cleaned as in the retrieval protocol), seeded."""
  from compclip_jax.data.negatives import SpacyTagger  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(seed)
  out = []
  for cap, a in zip(captions, SpacyTagger()(captions)):
    tok = [t for t, p in zip(a.tokens, a.pos) if p not in ("PUNCT", "SPACE")]
    pos = [p for p in a.pos if p not in ("PUNCT", "SPACE")]
    out.append([pre_caption(cap)] + [pre_caption(" ".join(str(w) for w in f(tok, pos, rng))) for f in PERTURBATIONS])
  return out


def load_order(data_dir: str, image_dir: str, dataset: str, cache_dir: str | None = None, seed: int = 0) -> Task:
  file = {"coco": "coco_karpathy_test.json", "flickr30k": "flickr30k_test.json"}[dataset]
  entries = read_test_captions(os.path.join(data_dir, "aro", file))
  cache_dir = cache_dir or os.path.join(data_dir, "aro")
  try:
    os.makedirs(cache_dir, exist_ok=True)
    writable = os.access(cache_dir, os.W_OK)
  except OSError:
    writable = False
  if not writable:  # e.g. a read-only benchmark folder
    cache_dir = os.path.join(os.path.expanduser("~"), ".cache", "compclip_jax", "aro")
    os.makedirs(cache_dir, exist_ok=True)
  cache = os.path.join(cache_dir, f"{dataset}_order.seed{seed}.json")
  captions = [c for _, caps in entries for c in caps]
  if os.path.exists(cache):
    with open(cache) as f:
      options = json.load(f)
    if [o[0] for o in options] != [pre_caption(c) for c in captions]:
      raise InputError(f"{cache} was generated for other captions; delete it to regenerate")
  else:
    options = order_options(captions, seed)
    with open(cache + ".tmp", "w") as f:
      json.dump(options, f)
    os.replace(cache + ".tmp", cache)
  images, texts = Index(), Index()
  rows, k = [], 0
  for rel, caps in entries:
    i = images.add(ImageRef(image_path(image_dir, dataset, rel)))
    for _ in caps:
      rows.append((i, [texts.add(o) for o in options[k]]))
      k += 1

  def score(img, txt, tie):
    ok = [scorers.argmax_correct((txt[opts] @ img[i])[None], 0, tie)[0] for i, opts in rows]
    return {"precision@1": float(np.mean(ok)), "count": len(rows), "negatives_file": cache}

  return Task(f"{dataset}_order", images, texts, score, examples=(rows,))
