"""A small synthetic compositional world rendered with PIL, written in the real data formats (CLIC CSV + images,
COCO-style JSON + paraphrases, SugarCrepe / SugarCrepe++ / Karpathy retrieval files), so the `:runlocal` and `:demo`
configs run the same loaders, transforms and evaluators as a real run. Training reads it as a data source
(`data.source="synthetic"`, `compclip_jax.data.world.synthetic_source`), evaluation as a benchmark source
(`evals.source="synthetic"`, `compclip_jax.evaluators.run.benchmark_dirs`); each is written once, on process 0, and
recorded in a manifest (`world.json`, `benchmarks.json`) that makes a rerun reuse it and refuse another (size, seed).

Scenes hold one or two objects (colour, shape, size) with a spatial relation between them, each object about half
the image's central square across (what a 64 px, patch-8 vision tower can see); images have varied sizes in both
orientations. Each image gets captions in varied phrasings, a multi-sentence description (CLIC's extra sentences) and
paraphrases (READ's). A world written with `binding_noise` p describes, in each caption independently with
probability p, the two objects with their colours exchanged ("a blue square left of a red circle" for a red square
left of a blue circle): at p = 0.5 its captions say which colours and shapes an image holds but nothing about which
goes with which — the bag-of-words supervision under which the demo's pretrained text tower learns (docs/demo.md).

Held out: a fixed set of *pairings* {(c1, s1), (c2, s2)} of two colour–shape bindings. Training scenes never hold a
held-out pairing (in any two of their objects); benchmark scenes are built on one. Every single binding ("red square")
is seen in training, but neither a benchmark image's pairing nor its swap ({(c2, s1), (c1, s2)}, the same pairing key)
ever is, so a model cannot pass the swap tests by remembering which pairs go together — it has to bind.
"""
from __future__ import annotations

import csv
import itertools
import json
import os

import numpy as np
from PIL import Image, ImageDraw

# Few colours on purpose: with many, colour alone tells the images of a batch apart and plain contrastive training
# never learns shapes (nor, then, which colour goes with which shape).
COLORS = {
    "red": (220, 40, 40), "blue": (40, 70, 220), "green": (40, 170, 60), "yellow": (235, 210, 40),
    "white": (245, 245, 245)
}
SHAPES = ("square", "circle", "triangle", "diamond", "star")
SIZES = ("small", "large")
RELATIONS = ("to the left of", "to the right of", "above", "below")
OPPOSITE = {
    "to the left of": "to the right of", "to the right of": "to the left of", "above": "below", "below": "above"
}
# slot of (first, second) object per relation; slots are regions of the image's central square (what the CLIP
# transform's centre crop keeps): 0 left, 1 right, 2 top, 3 bottom, 4 centre (a lone object). Large objects fill
# ~46 % of the square (≈ 29 px at 64 px, 3–4 patches of 8), small ones ~36 %: the vision tower sees the shapes.
_SLOT_OF = {"to the left of": (0, 1), "to the right of": (1, 0), "above": (2, 3), "below": (3, 2)}
_SLOTS = {
    0: (0.02, 0.27, 0.48, 0.73), 1: (0.52, 0.27, 0.98, 0.73), 2: (0.27, 0.02, 0.73, 0.48), 3: (0.27, 0.52, 0.73, 0.98),
    4: (0.25, 0.25, 0.75, 0.75)
}
SMALL_SHRINK = 0.05  # a small object's box is inset by this fraction of the square on each side
NUM_OBJECTS_P = (0.2, 0.8)  # P(1, 2 objects) in training scenes
HELD_OUT_FRACTION = 0.2


def pairing_key(o1, o2) -> tuple:
  """Key of the pairing of two objects (size, colour, shape): the unordered colours and the unordered shapes. An
  attribute swap or an object swap keeps it."""
  return tuple(sorted((o1[1], o2[1]))), tuple(sorted((o1[2], o2[2])))


def held_out_pairings(seed: int = 0) -> frozenset:
  """The fixed held-out pairing keys (a fraction HELD_OUT_FRACTION of all), shared by the world and its benchmarks."""
  keys = [
      (cs, ss) for cs in itertools.combinations(COLORS, 2) for ss in itertools.combinations_with_replacement(SHAPES, 2)
  ]
  rng = np.random.default_rng(seed)
  pick = rng.choice(len(keys), int(round(HELD_OUT_FRACTION * len(keys))), replace=False)
  return frozenset(keys[i] for i in pick)


def _objects(rng: np.random.Generator, n: int) -> list[tuple[str, str, str]]:
  colors = rng.choice(list(COLORS), n, replace=False)  # distinct colours: the colour names each object
  return [(str(rng.choice(SIZES)), str(c), str(rng.choice(SHAPES))) for c in colors]


def scene(rng: np.random.Generator, held: frozenset, *, benchmark: bool = False) -> dict:
  """A training scene (its two objects, if it has two, do not form a held-out pairing) or, with `benchmark`, a
  two-object scene whose objects do."""
  while True:
    n = 2 if benchmark else int(rng.choice((1, 2), p=NUM_OBJECTS_P))
    objs = _objects(rng, n)
    if n == 1 or (pairing_key(*objs) in held) == benchmark:
      return {"objects": objs, "relation": str(rng.choice(RELATIONS))}


def _draw(d: ImageDraw.ImageDraw, shape: str, box, color) -> None:
  x0, y0, x1, y1 = box
  cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
  if shape == "square":
    d.rectangle(box, fill=color)
  elif shape == "circle":
    d.ellipse(box, fill=color)
  elif shape == "triangle":
    d.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=color)
  elif shape == "diamond":
    d.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=color)
  else:  # a five-pointed star
    pts = [(cx + (rx if k % 2 == 0 else 0.45 * rx) * np.sin(k * np.pi / 5),
            cy - (ry if k % 2 == 0 else 0.45 * ry) * np.cos(k * np.pi / 5)) for k in range(10)]
    d.polygon(pts, fill=color)


def render(sc: dict, rng: np.random.Generator) -> Image.Image:
  """Varied sizes, both orientations; objects drawn inside the central square, so the centre crop keeps them.

  Long side 1.6–2 × the short one: CLIC squashes an image into half of the concatenated input (half width for a
  tall image, half height for a wide one), which then keeps its objects' proportions roughly intact."""
  h = int(rng.integers(64, 97))
  w = int(h * rng.uniform(1.6, 2.0))
  if rng.random() < 0.5:
    w, h = h, w
  img = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(90, 160, 3)))
  d = ImageDraw.Draw(img)
  side = min(w, h)
  ox, oy = (w - side) / 2, (h - side) / 2
  objs, rel = sc["objects"], sc["relation"]
  slots = [4] if len(objs) == 1 else list(_SLOT_OF[rel])
  for (size, color, shape), slot in zip(objs, slots):
    x0, y0, x1, y1 = _SLOTS[slot]
    shrink = (0.0 if size == "large" else SMALL_SHRINK) + rng.uniform(0.0, 0.015)
    box = (ox + (x0 + shrink) * side, oy + (y0 + shrink) * side, ox + (x1 - shrink) * side, oy + (y1 - shrink) * side)
    _draw(d, shape, box, COLORS[color])
  return img


def _np(o, size: bool = False) -> str:
  return f"a {o[0]} {o[1]} {o[2]}" if size else f"a {o[1]} {o[2]}"


def _the(o) -> str:
  return f"the {o[1]} {o[2]}"


def phrasings(sc: dict) -> list[str]:
  """Every phrasing of a scene the world uses (the first is the benchmark caption's template)."""
  objs, r = sc["objects"], sc["relation"]
  if len(objs) == 1:
    o = objs[0]
    return [
        _np(o), f"there is {_np(o)}", f"{_np(o, True)} on its own", f"a picture of {_np(o)}",
        f"{_np(o, True)} in the middle", f"only one shape: {_np(o)}"
    ]
  a, b = objs[:2]
  return [
      f"{_np(a)} {r} {_np(b)}", f"there is {_np(a)} {r} {_np(b)}", f"{_the(a)} is {r} {_the(b)}",
      f"{_np(a, True)} {r} {_np(b, True)}", f"{_np(b)} {OPPOSITE[r]} {_np(a)}", f"{r} {_np(b)} there is {_np(a)}",
      f"a picture of {_np(a)} {r} {_np(b)}"
  ]


def colours_exchanged(sc: dict) -> dict:
  """The scene with its two objects' colours exchanged (a one-object scene as it is): what a caption of
  `binding_noise` describes instead of the scene."""
  if len(sc["objects"]) < 2:
    return sc
  (z1, c1, s1), (z2, c2, s2) = sc["objects"]
  return {**sc, "objects": [(z1, c2, s1), (z2, c1, s2)]}


def captions(sc: dict, rng: np.random.Generator, binding_noise: float = 0.0,
             noise_rng: np.random.Generator | None = None) -> dict:
  """main (the CLIC CSV caption), extra (its further sentences), coco (5), paraphrases (of `main`).

  With `binding_noise` p, each caption (and the extra sentences, as one) describes `colours_exchanged(sc)` with
  probability p, drawn from `noise_rng` (default `rng`; a world draws them from a generator of their own, so its
  images and phrasings are those of the same world without noise)."""
  order = [int(k) for k in rng.permutation(len(phrasings(sc)))]
  told = [sc] * (len(order) + 1)
  if binding_noise > 0:
    noise_rng = noise_rng or rng
    told = [colours_exchanged(sc) if noise_rng.random() < binding_noise else sc for _ in told]
  ph = [phrasings(t)[k] for t, k in zip(told, order)]  # ph[i]: the i-th phrasing drawn, of what caption i tells
  objs = told[-1]["objects"]
  count = {1: "there is one shape in the picture", 2: "there are two shapes in the picture"}[len(objs)]
  extra = [f"{_the(o)} is {o[0]}" for o in objs] + [count]
  return {"main": ph[0], "extra": extra, "coco": ph[:5], "paraphrases": ph[5:] or [ph[-1]]}


WORLD_MANIFEST, BENCHMARKS_MANIFEST = "world.json", "benchmarks.json"
WORLD_FORMAT = 2  # bump when the files a (size, seed) world holds change (2: larger objects, no third object)


def _check_manifest(path: str, want: dict, what: str) -> bool:
  """True when `path` records exactly `want` (the files are complete and reusable); False when there is none (write
  them); a different record raises: reusing it would silently train or evaluate on another world."""
  if not os.path.exists(path):
    return False
  with open(path) as f:
    have = json.load(f)
  if have != want:
    diff = ", ".join(f"{k} {have.get(k)} (asked: {v})" for k, v in want.items() if have.get(k) != v)
    raise ValueError(f"{os.path.dirname(path)} holds other synthetic {what}: {diff}; point the config at another "
                     "folder (data.path / evals.data_dir) or delete this one")
  return True


def _write_manifest(path: str, record: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(record, f)
  os.replace(tmp, path)  # last, and atomic: a world is complete iff its manifest exists


def world_paths(root: str) -> dict:
  """The files of a world under `root` (`write_world` writes them)."""
  return {
      "images": os.path.join(root, "images"), "csv": os.path.join(root, "clic_rows.csv"),
      "coco_json": os.path.join(root, "dataset_coco.json"), "paraphrases": os.path.join(root, "paraphrases.json"),
      "manifest": os.path.join(root, WORLD_MANIFEST)
  }


def world_record(n: int, seed: int, binding_noise: float = 0.0) -> dict:
  """What `<root>/world.json` records of a world: it is a function of these alone."""
  record = {"format": WORLD_FORMAT, "size": int(n), "seed": int(seed)}
  return {**record, "binding_noise": float(binding_noise)} if binding_noise else record


def read_world(root: str, n: int, seed: int, binding_noise: float = 0.0) -> dict:
  """The paths of the complete world of (n, seed, binding_noise) under `root`; raises if it is missing or another."""
  paths = world_paths(root)
  if not _check_manifest(paths["manifest"], world_record(n, seed, binding_noise), "data"):
    raise FileNotFoundError(f"{root}: no synthetic world ({WORLD_MANIFEST} missing): process 0 writes it "
                            "(compclip_jax.synthetic.write_world)")
  return paths


def write_world(root: str, n: int, seed: int = 0, binding_noise: float = 0.0) -> dict:
  """Writes n training images and both data formats under `root`, then `world.json`; returns the paths.

  `binding_noise`: see `captions` (the images and phrasings are those of binding_noise 0). A complete world of the same
  (n, seed, binding_noise) is reused as it is; another raises (ValueError)."""
  if not 0.0 <= binding_noise <= 0.5:
    raise ValueError(f"binding_noise {binding_noise}: a probability in [0, 0.5]")
  paths = world_paths(root)
  if _check_manifest(paths["manifest"], world_record(n, seed, binding_noise), "data"):
    return paths
  os.makedirs(paths["images"], exist_ok=True)
  rng, noise_rng = np.random.default_rng(seed), np.random.default_rng([seed, 1])
  held = held_out_pairings()
  rows, images, paras = [], [], {}
  for i in range(n):
    sc = scene(rng, held)
    name = f"{i:05d}.png"
    render(sc, rng).save(os.path.join(paths["images"], name))
    caps = captions(sc, rng, binding_noise, noise_rng)
    rows.append([name, caps["main"], *caps["extra"]])
    images.append({
        "filepath": "", "filename": name, "split": "train", "cocoid": i, "imgid": i,
        "sentences": [{"raw": c} for c in caps["coco"]]
    })
    paras[str(i)] = caps["paraphrases"]
  with open(paths["csv"], "w", newline="") as f:  # csv quotes the captions of 3-object scenes (they hold a comma)
    csv.writer(f, lineterminator="\n").writerows(rows)
  with open(paths["coco_json"], "w") as f:
    json.dump({"images": images, "dataset": "synthetic"}, f)
  with open(paths["paraphrases"], "w") as f:
    json.dump(paras, f)
  _write_manifest(paths["manifest"], world_record(n, seed, binding_noise))
  return paths


# ------------------------------------------------------------------------------------- the bundled T5 tokenizer
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
  2; no bos), made by `python -m compclip_jax.synthetic --t5_tokenizer=compclip_jax/assets/synthetic_spiece.model`."""
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


def _other(options, exclude, rng) -> str:
  return str(rng.choice([o for o in options if o not in exclude]))


def benchmark_rows(sc: dict, rng: np.random.Generator) -> dict[str, dict]:
  """One SugarCrepe-style (caption, negative) per subset for a benchmark scene, plus SugarCrepe++'s second positive
  (the same meaning in other words: the relation inverted)."""
  objs, r = sc["objects"], sc["relation"]
  (z1, c1, s1), (z2, c2, s2) = objs
  say = lambda a, rel, b: f"{a} {rel} {b}"
  cap = say(f"a {c1} {s1}", r, f"a {c2} {s2}")
  c3 = _other(COLORS, {o[1] for o in objs}, rng)
  rows = {
      "replace_att": say(f"a {c3} {s1}", r, f"a {c2} {s2}"), "replace_obj": say(f"a {c1} {_other(SHAPES, {s1}, rng)}",
                                                                                r, f"a {c2} {s2}"),
      "replace_rel": say(f"a {c1} {s1}", OPPOSITE[r], f"a {c2} {s2}"),
      "swap_att": say(f"a {c2} {s1}", r, f"a {c1} {s2}"), "add_att": say(f"a {_other(SIZES, {z1}, rng)} {c1} {s1}", r,
                                                                         f"a {c2} {s2}"),
      "add_obj": say(f"a {c1} {s1} and a {c3} {_other(SHAPES, (), rng)}", r, f"a {c2} {s2}")
  }
  if s1 != s2:
    rows["swap_obj"] = say(f"a {c1} {s2}", r, f"a {c2} {s1}")
  para = f"a {c2} {s2} {OPPOSITE[r]} a {c1} {s1}"
  return {k: {"caption": cap, "caption2": para, "negative_caption": v} for k, v in rows.items()}


def benchmarks_record(n: int, seed: int) -> dict:
  """What `<data_dir>/benchmarks.json` records of a world's benchmarks: a function of these alone."""
  return {"format": WORLD_FORMAT, "size": int(n), "seed": int(seed)}


def read_benchmarks(data_dir: str, n: int, seed: int, image_dir: str = "") -> dict:
  """The folders of the complete benchmarks of (n, seed) under `data_dir`; raises if missing or another set."""
  images = image_dir or os.path.join(data_dir, "images")
  if not _check_manifest(os.path.join(data_dir, BENCHMARKS_MANIFEST), benchmarks_record(n, seed), "benchmarks"):
    raise FileNotFoundError(f"{data_dir}: no synthetic benchmarks ({BENCHMARKS_MANIFEST} missing): process 0 writes "
                            "them (compclip_jax.synthetic.write_benchmarks)")
  return {"data_dir": data_dir, "image_dir": images}


def write_benchmarks(data_dir: str, n: int, seed: int = 1, image_dir: str = "") -> dict:
  """SugarCrepe, SugarCrepe++ and Karpathy-test retrieval files of n fresh scenes, each built on a held-out pairing,
  in the real formats: annotations as `python -m compclip_jax.evaluate --data_dir` reads them (`sugarcrepe/`,
  `sugarcrepe_pp/`, `retrieval/`) under `data_dir`, images under `image_dir` (default `<data_dir>/images`), then
  `benchmarks.json`. Complete files of the same (n, seed) are reused; another (n, seed) raises (ValueError).
  → {"data_dir", "image_dir"}"""
  data, images = data_dir, image_dir or os.path.join(data_dir, "images")
  if _check_manifest(os.path.join(data, BENCHMARKS_MANIFEST), benchmarks_record(n, seed), "benchmarks"):
    return {"data_dir": data, "image_dir": images}
  for d in ("sugarcrepe", "sugarcrepe_pp", "retrieval"):
    os.makedirs(os.path.join(data, d), exist_ok=True)
  os.makedirs(images, exist_ok=True)
  rng = np.random.default_rng(seed)
  held = held_out_pairings()
  sc: dict[str, dict] = {}
  scpp: dict[str, list] = {}
  karpathy = []
  for i in range(n):
    scene_ = scene(rng, held, benchmark=True)
    name = f"bench_{i:05d}.png"
    render(scene_, rng).save(os.path.join(images, name))
    for subset, row in benchmark_rows(scene_, rng).items():
      sc.setdefault(
          subset,
          {})[str(i)] = {"filename": name, "caption": row["caption"], "negative_caption": row["negative_caption"]}
      if not subset.startswith("add"):
        scpp.setdefault(subset, []).append({"id": i, "filename": name, **row})
    karpathy.append({
        "filepath": "", "filename": name, "split": "test", "cocoid": i,
        "sentences": [{"raw": c} for c in captions(scene_, rng)["coco"]]
    })
  for subset, rows in sc.items():
    with open(os.path.join(data, "sugarcrepe", f"{subset}.json"), "w") as f:
      json.dump(rows, f)
  for subset, rows in scpp.items():
    with open(os.path.join(data, "sugarcrepe_pp", f"{subset}.json"), "w") as f:
      json.dump(rows, f)
  with open(os.path.join(data, "retrieval", "coco_test.json"), "w") as f:
    json.dump({"images": karpathy}, f)
  _write_manifest(os.path.join(data, BENCHMARKS_MANIFEST), benchmarks_record(n, seed))
  return {"data_dir": data, "image_dir": images}
