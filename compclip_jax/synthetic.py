"""A small synthetic compositional world rendered with PIL, written in the real data formats (CLIC CSV + images,
COCO-style JSON + paraphrases), so `:runlocal` configs exercise the same loaders and transforms as a real run.

Scenes hold two objects (colour, shape, size) in a spatial relation; images have varied sizes in both orientations.
Each image gets a main caption, extra sentences (CLIC's long description), five COCO-style captions and paraphrases.
"""
from __future__ import annotations

import json
import os

import numpy as np
from PIL import Image, ImageDraw

COLORS = {"red": (220, 40, 40), "blue": (40, 70, 220), "green": (40, 170, 60), "yellow": (235, 210, 40),
          "purple": (140, 60, 170), "white": (245, 245, 245), "black": (20, 20, 20), "orange": (240, 140, 30)}
SHAPES = ("square", "circle", "triangle")
SIZES = ("small", "large")
RELATIONS = {"left of": (0, 1), "right of": (1, 0), "above": (2, 3), "below": (3, 2)}


def _draw(d: ImageDraw.ImageDraw, shape: str, box, color):
  x0, y0, x1, y1 = box
  if shape == "square":
    d.rectangle(box, fill=color)
  elif shape == "circle":
    d.ellipse(box, fill=color)
  else:
    d.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=color)


BINDINGS = tuple((c, sh) for c in COLORS for sh in SHAPES)
HELD_COLORS, HELD_SHAPES = 3, 2  # a block of colour × shape bindings that never occurs in training scenes


def split_bindings(seed: int = 0) -> tuple[tuple, tuple]:
  """(training bindings, held-out bindings): a fixed split of colour × shape, shared by the world and its
  benchmarks. The held-out set is a block (3 colours × 2 shapes), so that swapping the attributes or objects of a
  held-out scene yields held-out bindings again: neither the caption nor its swap negative was seen in training."""
  rng = np.random.default_rng(seed)
  colors = set(rng.choice(list(COLORS), HELD_COLORS, replace=False).tolist())
  shapes = set(rng.choice(list(SHAPES), HELD_SHAPES, replace=False).tolist())
  held = tuple(b for b in BINDINGS if b[0] in colors and b[1] in shapes)
  return tuple(b for b in BINDINGS if b not in held), held


def scene(rng: np.random.Generator, bindings=BINDINGS) -> dict:
  """Two objects of different colours drawn from `bindings`, sizes and a relation."""
  while True:
    (c1, s1), (c2, s2) = (bindings[k] for k in rng.choice(len(bindings), 2, replace=False))
    if c1 != c2:
      break
  z1, z2 = rng.choice(SIZES), rng.choice(SIZES)
  return {"objects": [(str(z1), str(c1), str(s1)), (str(z2), str(c2), str(s2))],
          "relation": str(rng.choice(list(RELATIONS)))}


def render(sc: dict, rng: np.random.Generator) -> Image.Image:
  w, h = (int(rng.integers(96, 160)), int(rng.integers(64, 96)))
  if rng.random() < 0.5:
    w, h = h, w
  img = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(90, 160, 3)))
  d = ImageDraw.Draw(img)
  slots = {0: (0.05, 0.3, 0.45, 0.7), 1: (0.55, 0.3, 0.95, 0.7), 2: (0.3, 0.05, 0.7, 0.45), 3: (0.3, 0.55, 0.7, 0.95)}
  for (size, color, shape), slot in zip(sc["objects"], RELATIONS[sc["relation"]]):
    x0, y0, x1, y1 = slots[slot]
    shrink = 0.0 if size == "large" else 0.12
    box = ((x0 + shrink) * w, (y0 + shrink) * h, (x1 - shrink) * w, (y1 - shrink) * h)
    _draw(d, shape, box, COLORS[color])
  return img


def captions(sc: dict) -> dict:
  (z1, c1, s1), (z2, c2, s2) = sc["objects"]
  r = sc["relation"]
  main = f"a {c1} {s1} {r} a {c2} {s2}"
  return {"main": main,
          "extra": [f"the {c1} {s1} is {z1}", f"the {c2} {s2} is {z2}", f"there are two shapes in the picture"],
          "coco": [main, f"a {z1} {c1} {s1} {r} a {z2} {c2} {s2}", f"the {c1} {s1} is {r} the {c2} {s2}",
                   f"a {c1} {s1} and a {c2} {s2}, the first {r} the second", f"two shapes: a {c1} {s1} and a {c2} {s2}"],
          "paraphrases": [f"there is a {c1} {s1} {r} a {c2} {s2}", f"{r} a {c2} {s2} sits a {c1} {s1}"]}


def write_world(root: str, n: int, seed: int = 0) -> dict:
  """Writes n images and both data formats under `root`; returns the paths. Reruns reuse what is there."""
  paths = {"images": os.path.join(root, "images"), "csv": os.path.join(root, "clic_rows.csv"),
           "coco_json": os.path.join(root, "dataset_coco.json"), "paraphrases": os.path.join(root, "paraphrases.json")}
  if all(os.path.exists(p) for p in paths.values()):
    return paths
  os.makedirs(paths["images"], exist_ok=True)
  rng = np.random.default_rng(seed)
  train_bindings, _ = split_bindings()
  rows, images, paras = [], [], {}
  for i in range(n):
    sc = scene(rng, train_bindings)
    name = f"{i:05d}.png"
    render(sc, rng).save(os.path.join(paths["images"], name))
    caps = captions(sc)
    rows.append(",".join([name, caps["main"], *caps["extra"]]))
    images.append({"filepath": "", "filename": name, "split": "train", "cocoid": i, "imgid": i,
                   "sentences": [{"raw": c} for c in caps["coco"]]})
    paras[str(i)] = caps["paraphrases"]
  with open(paths["csv"], "w") as f:
    f.write("\n".join(rows) + "\n")
  with open(paths["coco_json"], "w") as f:
    json.dump({"images": images, "dataset": "synthetic"}, f)
  with open(paths["paraphrases"], "w") as f:
    json.dump(paras, f)
  return paths


def write_t5_tokenizer(root: str, coco_json: str, vocab_size: int = 200) -> str:
  """A SentencePiece model trained on the world's captions (the frozen READ decoder's tokenizer) → spiece.model."""
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  out = os.path.join(root, "spiece.model")
  if not os.path.exists(out):
    with open(coco_json) as f:
      sents = [s["raw"] for im in json.load(f)["images"] for s in im["sentences"]]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sents), model_prefix=out[: -len(".model")],
                                   vocab_size=vocab_size, hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2,
                                   bos_id=-1, minloglevel=2)
  return out


OPPOSITE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


def _other(options, exclude, rng):
  return str(rng.choice([o for o in options if o not in exclude]))


def benchmark_rows(sc: dict, rng: np.random.Generator) -> dict[str, dict]:
  """One SugarCrepe-style (caption, negative) per subset for a scene, plus SugarCrepe++'s second positive."""
  (z1, c1, s1), (z2, c2, s2) = sc["objects"]
  r = sc["relation"]
  cap = f"a {c1} {s1} {r} a {c2} {s2}"
  para = f"there is a {c1} {s1} {r} a {c2} {s2}"
  c3 = _other(COLORS, {c1, c2}, rng)
  s3 = _other(SHAPES, {s1, s2}, rng) if len({s1, s2}) < len(SHAPES) else None
  rows = {"replace_att": f"a {c3} {s1} {r} a {c2} {s2}", "replace_rel": f"a {c1} {s1} {OPPOSITE[r]} a {c2} {s2}",
          "swap_att": f"a {c2} {s1} {r} a {c1} {s2}",
          "add_att": f"a {_other(SIZES, {z1}, rng)} {c1} {s1} {r} a {c2} {s2}",
          "add_obj": f"a {c1} {s1} and a {c3} {s3 or s1} {r} a {c2} {s2}"}
  if s3:
    rows["replace_obj"] = f"a {c1} {s3} {r} a {c2} {s2}"
  if s1 != s2:
    rows["swap_obj"] = f"a {c1} {s2} {r} a {c2} {s1}"
  return {k: {"caption": cap, "caption2": para, "negative_caption": v} for k, v in rows.items()}


def write_benchmarks(root: str, n: int, seed: int = 1) -> dict:
  """SugarCrepe, SugarCrepe++ and Karpathy-test retrieval files of n fresh scenes built only from held-out
  colour–shape bindings, in the real formats, under `root/data` (annotations) and `root/images`. Reruns reuse what
  is there."""
  data, images = os.path.join(root, "data"), os.path.join(root, "images")
  done = os.path.join(root, "complete")
  if os.path.exists(done):
    return {"data_dir": data, "image_dir": images}
  for d in ("sugarcrepe", "sugarcrepe_pp", "retrieval"):
    os.makedirs(os.path.join(data, d), exist_ok=True)
  os.makedirs(images, exist_ok=True)
  rng = np.random.default_rng(seed)
  _, held_out = split_bindings()
  sc: dict[str, dict] = {}
  scpp: dict[str, list] = {}
  karpathy = []
  for i in range(n):
    scene_ = scene(rng, held_out)
    name = f"bench_{i:05d}.png"
    render(scene_, rng).save(os.path.join(images, name))
    for subset, row in benchmark_rows(scene_, rng).items():
      sc.setdefault(subset, {})[str(i)] = {"filename": name, "caption": row["caption"],
                                          "negative_caption": row["negative_caption"]}
      if not subset.startswith("add"):
        scpp.setdefault(subset, []).append({"id": i, "filename": name, **row})
    karpathy.append({"filepath": "", "filename": name, "split": "test", "cocoid": i,
                     "sentences": [{"raw": c} for c in captions(scene_)["coco"]]})
  for subset, rows in sc.items():
    with open(os.path.join(data, "sugarcrepe", f"{subset}.json"), "w") as f:
      json.dump(rows, f)
  for subset, rows in scpp.items():
    with open(os.path.join(data, "sugarcrepe_pp", f"{subset}.json"), "w") as f:
      json.dump(rows, f)
  with open(os.path.join(data, "retrieval", "coco_test.json"), "w") as f:
    json.dump({"images": karpathy}, f)
  open(done, "w").close()
  return {"data_dir": data, "image_dir": images}
