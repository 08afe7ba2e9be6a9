"""A small synthetic compositional world rendered with PIL, written in the real data formats (CLIC CSV + images,
COCO-style JSON + paraphrases, SugarCrepe / SugarCrepe++ / Karpathy retrieval files), so the `:runlocal` and `:demo`
configs run the same loaders, transforms and evaluators as a real run. Training reads it as a data source
(`data.source="synthetic"`, `compclip_jax.data.synthetic.world.synthetic_source`), evaluation as a benchmark source
(`evals.source="synthetic"`, `compclip_jax.evaluators.run.benchmark_dirs`); each is written once, on process 0, and
recorded in a manifest (`world.json`, `benchmarks.json`) that makes a rerun reuse it and refuse another (size, seed).

World format 4 (CLIC's data regime, rules fixed before any model of it existed; format 3's captions with
larger small objects and thinner textures, for the gate's collage halves; docs/demo.md). Every scene
holds two objects, one small and one large, each with a colour (10), a shape (10) and a texture (plain, striped,
dotted), one above, below or beside the other, on a background that the scene word names (outdoors, nearby,
ashore, aloft). Each image gets a first sentence in one template — "a small red heart above a large blue star
outdoors" — naming both objects with two attributes each (size, colour), the relation and the scene word (10 words:
CLIC's swappable words are then one kind per spaCy class: colours ADJ, shapes NOUN, relations ADP, scene words ADV;
the sizes are in every first sentence, so CLIC's shared-word removal never offers them), 3–5 further sentences from
22 templates about textures, sizes, places and the scene, other phrasings (COCO captions) and paraphrases (READ's).
Images have varied sizes in both orientations; objects lie in the central square (what the centre crop keeps). A
world written with `binding_noise` p describes, in each caption independently with probability p, the two objects
with their colours exchanged, and with probability p their shapes: at p = 0.5 its captions say which colours and
shapes an image holds but nothing about which goes with which (nor which is small, nor where) — the bag-of-words
supervision under which the demo's pretrained text tower learns.

Held out: a fixed set of *pairings* {(c1, s1), (c2, s2)} of two colour–shape bindings. Training scenes never hold a
held-out pairing; benchmark scenes are built on one. Every single binding ("red square") is seen in training, but
neither a benchmark image's pairing nor its swap ({(c2, s1), (c1, s2)}, the same pairing key) ever is, so a model
cannot pass the swap tests by remembering which pairs go together — it has to bind.
"""
from __future__ import annotations

import csv
import itertools
import json
import os

import numpy as np
from PIL import Image, ImageDraw

# Colour words spaCy's small English pipeline tags ADJ in ≥ 99 % of these sentences (white, purple, orange, silver …
# are often NOUN / PROPN, which would put them in the shapes' class); RGB values far from each other and from every
# background.
COLORS = {
    "red": (215, 35, 35), "yellow": (240, 220, 40), "green": (35, 160, 55), "blue": (35, 65, 215),
    "pink": (245, 140, 190), "brown": (120, 70, 30), "black": (15, 15, 15), "gray": (115, 115, 115),
    "golden": (195, 145, 15), "beige": (205, 180, 135)
}
# shape words spaCy tags NOUN in ≥ 98 % of these sentences (square, cross, hexagon … are not)
SHAPES = ("circle", "triangle", "diamond", "star", "heart", "arrow", "ring", "oval", "rectangle", "drop")
SIZES = ("small", "large")
TEXTURES = ("plain", "striped", "dotted")
RELATIONS = ("above", "below", "beside")  # single words, ADP: "to the left of" would add a NOUN and two ADPs
OPPOSITE = {"above": "below", "below": "above", "beside": "beside"}
# the scene word (ADV) and the background it names
SCENES = {"outdoors": (180, 212, 168), "nearby": (212, 212, 218), "ashore": (236, 222, 236), "aloft": (176, 202, 238)}
_COLOR_NAMES, _SCENE_NAMES = tuple(COLORS), tuple(SCENES)  # what scene() draws indices into
# object slots as fractions of the image's central square: 0 left, 1 right, 2 top, 3 bottom. Large objects fill
# ~46 % of the square (≈ 29 px at 64 px, 3–4 patches of 8), small ones ~38 % (in a collage half: ≈ 15 and 12 px).
_SLOTS = {
    0: (0.02, 0.27, 0.48, 0.73), 1: (0.52, 0.27, 0.98, 0.73), 2: (0.27, 0.02, 0.73, 0.48), 3: (0.27, 0.52, 0.73, 0.98)
}
# a small object's box is inset by this fraction of the square on each side (world format 3: 0.07, small objects of
# ~32 %, ≈ 10 px in a collage half — the collage binding probe stayed at ~85 %, docs/demo.md "The gate")
SMALL_SHRINK = 0.04
HELD_OUT_FRACTION = 0.2


def pairing_key(o1, o2) -> tuple:
  """Key of the pairing of two objects (size, colour, shape, texture): the unordered colours and the unordered
  shapes. An attribute swap or an object swap keeps it."""
  return tuple(sorted((o1[1], o2[1]))), tuple(sorted((o1[2], o2[2])))


def held_out_pairings(seed: int = 0) -> frozenset:
  """The fixed held-out pairing keys (a fraction HELD_OUT_FRACTION of all), shared by the world and its benchmarks."""
  keys = [
      (cs, ss) for cs in itertools.combinations(COLORS, 2) for ss in itertools.combinations_with_replacement(SHAPES, 2)
  ]
  rng = np.random.default_rng(seed)
  pick = rng.choice(len(keys), int(round(HELD_OUT_FRACTION * len(keys))), replace=False)
  return frozenset(keys[i] for i in pick)


def _objects(rng: np.random.Generator) -> list[tuple[str, str, str, str]]:
  """Two objects (size, colour, shape, texture): one small and one large, in random order; distinct colours (the
  colour names each object)."""
  # indices drawn, not names: the same draws as rng.choice / rng.permutation of the names (the world of a seed is
  # unchanged), without turning the name lists into numpy arrays for every object (~20 tries a held-out scene)
  sizes = [SIZES[i] for i in rng.permutation(len(SIZES))]
  return [(z, _COLOR_NAMES[c], SHAPES[rng.integers(len(SHAPES))], TEXTURES[rng.integers(len(TEXTURES))])
          for z, c in zip(sizes, rng.choice(len(_COLOR_NAMES), 2, replace=False))]


def scene(rng: np.random.Generator, held: frozenset, *, benchmark: bool = False) -> dict:
  """A training scene (its two objects do not form a held-out pairing) or, with `benchmark`, one whose objects do.
  → {"objects": [a, b] (a is named first), "relation": a's place relative to b, "scene": the scene word,
  "side": a's slot when beside (0 left, 1 right)}"""
  while True:
    objs = _objects(rng)
    rel, where = RELATIONS[rng.integers(len(RELATIONS))], _SCENE_NAMES[rng.integers(len(_SCENE_NAMES))]
    side = int(rng.integers(2))
    if (pairing_key(*objs) in held) == benchmark:
      return {"objects": objs, "relation": rel, "scene": where, "side": side}


def slots(sc: dict) -> tuple[int, int]:
  """The slots (_SLOTS) of the scene's two objects."""
  rel = sc["relation"]
  if rel == "beside":
    return (0, 1) if sc.get("side", 0) == 0 else (1, 0)
  return (2, 3) if rel == "above" else (3, 2)


def _draw(d: ImageDraw.ImageDraw, shape: str, box, fill) -> None:
  x0, y0, x1, y1 = box
  cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
  poly = lambda pts: d.polygon([(cx + u * rx, cy + v * ry) for u, v in pts], fill=fill)
  if shape == "circle":
    d.ellipse(box, fill=fill)
  elif shape == "oval":  # upright, half as wide as tall
    d.ellipse((cx - 0.5 * rx, y0, cx + 0.5 * rx, y1), fill=fill)
  elif shape == "ring":
    d.ellipse(box, fill=fill)
    d.ellipse((cx - 0.5 * rx, cy - 0.5 * ry, cx + 0.5 * rx, cy + 0.5 * ry), fill=0)
  elif shape == "rectangle":  # wide, half as tall as wide
    d.rectangle((x0, cy - 0.5 * ry, x1, cy + 0.5 * ry), fill=fill)
  elif shape == "triangle":
    poly([(0, -1), (1, 1), (-1, 1)])
  elif shape == "diamond":
    poly([(0, -1), (1, 0), (0, 1), (-1, 0)])
  elif shape == "arrow":  # pointing right
    poly([(-1, -0.3), (0.1, -0.3), (0.1, -0.9), (1, 0), (0.1, 0.9), (0.1, 0.3), (-1, 0.3)])
  elif shape == "heart":
    d.ellipse((x0, y0, cx + 0.05 * rx, cy + 0.1 * ry), fill=fill)
    d.ellipse((cx - 0.05 * rx, y0, x1, cy + 0.1 * ry), fill=fill)
    poly([(-0.97, -0.1), (0.97, -0.1), (0, 1)])
  elif shape == "drop":  # a point on top, round below
    d.ellipse((x0 + 0.15 * rx, cy - 0.3 * ry, x1 - 0.15 * rx, y1), fill=fill)
    poly([(0, -1), (0.8, 0.25), (-0.8, 0.25)])
  else:  # a five-pointed star
    poly([((1 if k % 2 == 0 else 0.45) * np.sin(k * np.pi / 5), -(1 if k % 2 == 0 else 0.45) * np.cos(k * np.pi / 5))
          for k in range(10)])


def _shade(color) -> tuple:
  """The texture's second colour: 40 % of the way to black for a light colour, to white for a dark one. Format 3's
  shades (half the colour / the colour + 110) were other palette colours (black's the gray, brown's the beige,
  golden's the brown), which a small object's average could not tell apart."""
  c = np.asarray(color, np.float64)
  return tuple(int(v) for v in (c * 0.6 if c.mean() > 90 else c + 0.4 * (255 - c)))


def _paint(img: Image.Image, shape: str, box, color, texture: str) -> None:
  """One object: its shape as a mask, filled with its colour and texture (thin stripes or small dots in a second
  shade, a quarter of the area at most, so the object's average stays its own colour)."""
  x0, y0, x1, y1 = (int(round(v)) for v in box)
  w, h = x1 - x0, y1 - y0
  mask = Image.new("L", (w, h), 0)
  _draw(ImageDraw.Draw(mask), shape, (0, 0, w - 1, h - 1), 255)
  fill = Image.new("RGB", (w, h), color)
  d, period, shade = ImageDraw.Draw(fill), max(4, w // 5), _shade(color)
  if texture == "striped":
    for y in range(0, h, period):
      d.rectangle((0, y, w, y + max(1, period // 4) - 1), fill=shade)
  elif texture == "dotted":
    r = max(1, period // 5)
    for y in range(period // 2, h, period):
      for x in range(period // 2, w, period):
        d.ellipse((x - r, y - r, x + r, y + r), fill=shade)
  img.paste(fill, (x0, y0), mask)


def render(sc: dict, rng: np.random.Generator) -> Image.Image:
  """Varied sizes, both orientations; objects drawn inside the central square, so the centre crop keeps them; the
  background is the scene word's.

  Long side 1.6–2 × the short one: CLIC squashes an image into half of the concatenated input (half width for a
  tall image, half height for a wide one), which then keeps its objects' proportions roughly intact."""
  h = int(rng.integers(64, 97))
  w = int(h * rng.uniform(1.6, 2.0))
  if rng.random() < 0.5:
    w, h = h, w
  bg = np.clip(np.asarray(SCENES[sc["scene"]]) + rng.integers(-8, 9, 3), 0, 255)
  img = Image.new("RGB", (w, h), tuple(int(v) for v in bg))
  side = min(w, h)
  ox, oy = (w - side) / 2, (h - side) / 2
  for (size, color, shape, texture), slot in zip(sc["objects"], slots(sc)):
    x0, y0, x1, y1 = _SLOTS[slot]
    shrink = (0.0 if size == "large" else SMALL_SHRINK) + rng.uniform(0.0, 0.015)
    box = (ox + (x0 + shrink) * side, oy + (y0 + shrink) * side, ox + (x1 - shrink) * side, oy + (y1 - shrink) * side)
    _paint(img, shape, box, COLORS[color], texture)
  return img


def _np(o, size: bool = True) -> str:
  return f"a {o[0]} {o[1]} {o[2]}" if size else f"a {o[1]} {o[2]}"


def _the(o) -> str:
  return f"the {o[1]} {o[2]}"


def first_sentence(sc: dict) -> str:
  """The first sentence's one template (CLIC's negatives are built on it; the benchmark captions use it too):
  'a small red heart above a large blue star outdoors'."""
  a, b = sc["objects"]
  return f"{_np(a)} {sc['relation']} {_np(b)} {sc['scene']}"


def phrasings(sc: dict) -> list[str]:
  """Every phrasing of a scene's first sentence the world uses (the first: `first_sentence`)."""
  (a, b), r, where = sc["objects"], sc["relation"], sc["scene"]
  return [
      first_sentence(sc), f"there is {_np(a)} {r} {_np(b)} {where}", f"{_np(b)} {OPPOSITE[r]} {_np(a)} {where}",
      f"{_the(a)} is {r} {_the(b)} {where}", f"a picture of {_np(a, False)} {r} {_np(b, False)} {where}",
      f"{where} there is {_np(a)} {r} {_np(b)}", f"two shapes {where}: {_np(a)} {r} {_np(b)}"
  ]


_PATTERN = {"plain": "no pattern", "striped": "stripes", "dotted": "dots"}


def _extra_templates(sc: dict) -> list[str | None]:
  """The further sentences a scene's description can hold (None: the template does not apply to this scene)."""
  (a, b), r, where = sc["objects"], sc["relation"], sc["scene"]
  small, large = (a, b) if a[0] == "small" else (b, a)
  one_shape = a[2] == b[2]  # then a sentence naming a shape alone does not say which object
  first, second = ((a, b) if slots(sc)[0] in (0, 2) else (b, a))  # top / left one first
  place = ("at the top", "at the bottom") if r != "beside" else ("on the left", "on the right")
  return [
      f"the {a[1]} {a[2]} is {a[3]}", f"the {b[1]} {b[2]} is {b[3]}", f"the {a[0]} {a[2]} is {a[1]}",
      f"the {b[0]} {b[2]} is {b[1]}", f"the {a[1]} shape is a {a[2]}", f"the {b[1]} shape is a {b[2]}",
      None if one_shape else f"the {a[2]} is {a[0]} and {a[1]}", None if one_shape else f"the {b[2]} is {b[0]} and "
      f"{b[1]}", "there are two shapes in the picture", f"both shapes are {where}",
      f"one shape is {a[1]} and the other is {b[1]}", f"the {a[1]} {a[2]} has {_PATTERN[a[3]]}",
      f"the {b[1]} {b[2]} has {_PATTERN[b[3]]}", f"the {first[1]} {first[2]} is {place[0]}",
      f"the {second[1]} {second[2]} is {place[1]}", f"the {a[0]} shape is {a[3]}", f"the {b[0]} shape is {b[3]}",
      f"the larger shape is a {large[1]} {large[2]}", f"the smaller shape is a {small[1]} {small[2]}",
      f"{_np(a, False)} and {_np(b, False)} are shown {where}", None if one_shape else f"the {a[2]} is {r} the {b[2]}",
      f"the two shapes are a {a[2]} and a {b[2]}"
  ]


EXTRA_TEMPLATES = 22
EXTRA_SENTENCES = (3, 5)  # how many further sentences a description holds (inclusive)


def colours_exchanged(sc: dict) -> dict:
  """The scene with its two objects' colours exchanged (its colour-swapped twin)."""
  return exchanged(sc, colours=True, shapes=False)


def exchanged(sc: dict, colours: bool, shapes: bool) -> dict:
  """The scene with its two objects' colours and / or shapes exchanged (sizes, textures and places kept): what a
  caption of `binding_noise` describes instead of the scene."""
  (z1, c1, s1, t1), (z2, c2, s2, t2) = sc["objects"]
  if colours:
    c1, c2 = c2, c1
  if shapes:
    s1, s2 = s2, s1
  return {**sc, "objects": [(z1, c1, s1, t1), (z2, c2, s2, t2)]}


def captions(sc: dict, rng: np.random.Generator, binding_noise: float = 0.0,
             noise_rng: np.random.Generator | None = None) -> dict:
  """main (the CLIC CSV's first sentence: `first_sentence`), extra (3–5 further sentences), coco (5: the first
  sentence and four other phrasings), paraphrases (the other phrasings).

  With `binding_noise` p, each caption (and the extra sentences, as one) describes the scene with its two objects'
  colours exchanged with probability p and, independently, their shapes exchanged with probability p (`exchanged`),
  drawn from `noise_rng` (default `rng`; a world draws them from a generator of their own, so its images and
  phrasings are those of the same world without noise). At p = 0.5 a caption says nothing about which colour goes with
  which shape, nor which shape or colour is the small one or in which place."""
  order = [0] + [1 + int(k) for k in rng.permutation(len(phrasings(sc)) - 1)]
  candidates = [k for k, t in enumerate(_extra_templates(sc)) if t is not None]
  n_extra = int(rng.integers(EXTRA_SENTENCES[0], EXTRA_SENTENCES[1] + 1))
  picked = [int(k) for k in rng.choice(candidates, n_extra, replace=False)]
  told = [sc] * (len(order) + 1)
  if binding_noise > 0:
    noise_rng = noise_rng or rng
    told = [exchanged(sc, noise_rng.random() < binding_noise, noise_rng.random() < binding_noise) for _ in told]
  ph = [phrasings(t)[k] for t, k in zip(told, order)]  # ph[i]: the i-th phrasing drawn, of what caption i tells
  extra = [_extra_templates(told[-1])[k] for k in picked]
  return {"main": ph[0], "extra": extra, "coco": ph[:5], "paraphrases": ph[5:]}


WORLD_MANIFEST, BENCHMARKS_MANIFEST = "world.json", "benchmarks.json"
WORLD_FORMAT = 4  # bump when the files a (size, seed) world holds change (2: larger objects, no third object;
# 3: CLIC's data regime, two objects of four attributes, one first-sentence template, 22 extra-sentence templates;
# 4: larger small objects, thin textures in shades of the object's own colour, for the collage binding gate)


def check_manifest(path: str, want: dict, what: str) -> bool:
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


def write_manifest(path: str, record: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(record, f)
  os.replace(tmp, path)  # last, and atomic: a world is complete iff its manifest exists


def world_paths(root: str) -> dict:
  """The files of a world under `root` (`write_world` writes them)."""
  return {
      "images": os.path.join(root, "images"), "csv": os.path.join(root, "clic_rows.csv"),
      "coco_json": os.path.join(root, "dataset_coco.json"), "paraphrases": os.path.join(root, "paraphrases.json"),
      "scenes": os.path.join(root, "scenes.json"), "manifest": os.path.join(root, WORLD_MANIFEST)
  }


def world_record(n: int, seed: int, binding_noise: float = 0.0) -> dict:
  """What `<root>/world.json` records of a world: it is a function of these alone."""
  record = {"format": WORLD_FORMAT, "size": int(n), "seed": int(seed)}
  return {**record, "binding_noise": float(binding_noise)} if binding_noise else record


def read_world(root: str, n: int, seed: int, binding_noise: float = 0.0) -> dict:
  """The paths of the complete world of (n, seed, binding_noise) under `root`; raises if it is missing or another."""
  paths = world_paths(root)
  if not check_manifest(paths["manifest"], world_record(n, seed, binding_noise), "data"):
    raise FileNotFoundError(f"{root}: no synthetic world ({WORLD_MANIFEST} missing): process 0 writes it "
                            "(compclip_jax.data.synthetic.scenes.write_world)")
  return paths


def write_world(root: str, n: int, seed: int = 0, binding_noise: float = 0.0) -> dict:
  """Writes n training images and both data formats under `root`, then `world.json`; returns the paths.

  `binding_noise`: see `captions` (the images and phrasings are those of binding_noise 0). A complete world of the same
  (n, seed, binding_noise) is reused as it is; another raises (ValueError)."""
  if not 0.0 <= binding_noise <= 0.5:
    raise ValueError(f"binding_noise {binding_noise}: a probability in [0, 0.5]")
  paths = world_paths(root)
  if check_manifest(paths["manifest"], world_record(n, seed, binding_noise), "data"):
    return paths
  os.makedirs(paths["images"], exist_ok=True)
  rng, noise_rng = np.random.default_rng(seed), np.random.default_rng([seed, 1])
  held = held_out_pairings()
  rows, images, paras, scenes = [], [], {}, []
  for i in range(n):
    sc = scene(rng, held)
    scenes.append(sc)
    name = f"{i:05d}.png"
    render(sc, rng).save(os.path.join(paths["images"], name))
    caps = captions(sc, rng, binding_noise, noise_rng)
    rows.append([name, caps["main"], *caps["extra"]])
    images.append({
        "filepath": "", "filename": name, "split": "train", "cocoid": i, "imgid": i,
        "sentences": [{"raw": c} for c in caps["coco"]]
    })
    paras[str(i)] = caps["paraphrases"]
  with open(paths["csv"], "w", newline="") as f:  # csv quotes a caption that holds a comma
    csv.writer(f, lineterminator="\n").writerows(rows)
  with open(paths["coco_json"], "w") as f:
    json.dump({"images": images, "dataset": "synthetic"}, f)
  with open(paths["paraphrases"], "w") as f:
    json.dump(paras, f)
  with open(paths["scenes"], "w") as f:  # what each image shows, for the diagnostics (demo/diagnose.py)
    json.dump(scenes, f)
  write_manifest(paths["manifest"], world_record(n, seed, binding_noise))
  return paths
