"""Diagnostics of a CLIP on the synthetic world (docs/demo.md): what its frozen embeddings carry.

- *bag probe*: a linear probe (ridge regression on ±1 targets) from an embedding to which colours and which shapes
  a scene holds (10 labels); per-label accuracy, chance = the majority rate of each label;
- *binding probe*: a linear probe from an embedding to which (colour, shape) bindings a scene holds (25 labels),
  scored on held-out two-object scenes of two different shapes: correct when the probe rates the scene's own two
  bindings above their swap ({red square, blue circle} vs {blue square, red circle}); chance 50 %;
- *place probe*: a linear probe from an embedding to which colour is in which place (left, right, top, bottom:
  20 labels), scored on held-out scenes of two objects of the *same* shape — where swapping the colours (SugarCrepe's
  swap_att of "a white square below a green square") changes only which colour is where; chance 50 %.
Both are trained on training-world scenes and tested on scenes built on the held-out pairings (compclip_jax/
synthetic.py), once on image embeddings and once on text embeddings of each scene's plain caption ("a red square
to the left of a blue circle"): a binding-aware vision tower and a bag-of-words text tower show as a high image
binding probe beside a text binding probe near chance.
"""
from __future__ import annotations

import json
import os
from typing import Callable

import numpy as np

from compclip_jax.data import synthetic

COLOURS, SHAPES = tuple(synthetic.COLORS), synthetic.SHAPES
BINDINGS = tuple((c, s) for c in COLOURS for s in SHAPES)


def probe_scenes(n_train: int, n_test: int, seed: int) -> tuple[list[dict], list[dict], list[dict]]:
  """n_train training-world scenes (one or two objects), n_test held-out-pairing scenes of two shapes that differ
  (where a swap changes the bindings) and n_test of two objects of the same shape (where it changes the places)."""
  rng = np.random.default_rng(seed)
  held = synthetic.held_out_pairings()
  train = [synthetic.scene(rng, held) for _ in range(n_train)]
  test: dict[bool, list] = {False: [], True: []}
  while min(len(v) for v in test.values()) < n_test:
    sc = synthetic.scene(rng, held, benchmark=True)
    same = test[sc["objects"][0][2] == sc["objects"][1][2]]
    if len(same) < n_test:
      same.append(sc)
  return train, test[False], test[True]


def render_scenes(scenes: list[dict], folder: str, seed: int) -> list[str]:
  """The scenes' images as PNGs in `folder` (written once: `folder/scenes.json` records the scenes)."""
  record = os.path.join(folder, "scenes.json")
  paths = [os.path.join(folder, f"{i:05d}.png") for i in range(len(scenes))]
  if os.path.exists(record):
    with open(record) as f:
      if json.load(f) == {"seed": seed, "scenes": json.loads(json.dumps(scenes))}:
        return paths
  os.makedirs(folder, exist_ok=True)
  rng = np.random.default_rng([seed, 2])
  for sc, path in zip(scenes, paths):
    synthetic.render(sc, rng).save(path)
  with open(record, "w") as f:
    json.dump({"seed": seed, "scenes": scenes}, f)
  return paths


def plain_caption(sc: dict) -> str:
  """The benchmark caption's template: 'a red square to the left of a blue circle' ('a red square' alone)."""
  return synthetic.phrasings(sc)[0]


def bag_targets(scenes: list[dict]) -> np.ndarray:
  """[N, 10] 1/0: colour k present (first 5), shape k present (last 5)."""
  y = np.zeros((len(scenes), len(COLOURS) + len(SHAPES)), np.float64)
  for i, sc in enumerate(scenes):
    for _, c, s in sc["objects"]:
      y[i, COLOURS.index(c)] = y[i, len(COLOURS) + SHAPES.index(s)] = 1
  return y


def binding_targets(scenes: list[dict]) -> np.ndarray:
  """[N, 25] 1/0: binding (colour, shape) present."""
  y = np.zeros((len(scenes), len(BINDINGS)), np.float64)
  for i, sc in enumerate(scenes):
    for _, c, s in sc["objects"]:
      y[i, BINDINGS.index((c, s))] = 1
  return y


def ridge(x: np.ndarray, y: np.ndarray, lam: float = 1.0) -> np.ndarray:
  """[D + 1, K] weights (last row: bias) of ridge regression from x [N, D] to ±1 targets (y [N, K] in 1/0)."""
  xb = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float64)
  reg = lam * np.eye(xb.shape[1])
  reg[-1, -1] = 0.0  # the bias is not shrunk
  return np.linalg.solve(xb.T @ xb + reg, xb.T @ (2 * y - 1))


def _scores(w: np.ndarray, x: np.ndarray) -> np.ndarray:
  return np.concatenate([x, np.ones((len(x), 1))], 1) @ w


def bag_accuracy(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
  """(mean per-label accuracy of the probe, of the majority guess per label) on x [N, D], y [N, 10]."""
  acc = ((_scores(w, x) > 0) == (y > 0.5)).mean()
  chance = np.maximum(y.mean(0), 1 - y.mean(0)).mean()
  return float(acc), float(chance)


PLACES = ("left", "right", "top", "bottom")  # synthetic._SLOTS 0–3
COLOUR_PLACES = tuple((c, p) for c in COLOURS for p in PLACES)


def _places(sc: dict) -> list[str]:
  """The place of each object ("centre" for a lone one)."""
  if len(sc["objects"]) == 1:
    return ["centre"]
  return [PLACES[k] for k in synthetic._SLOT_OF[sc["relation"]]]  # pylint: disable=protected-access


def place_targets(scenes: list[dict]) -> np.ndarray:
  """[N, 20] 1/0: colour c in place p (a lone object, in the centre, has none)."""
  y = np.zeros((len(scenes), len(COLOUR_PLACES)), np.float64)
  for i, sc in enumerate(scenes):
    for (_, c, _), p in zip(sc["objects"], _places(sc)):
      if p != "centre":
        y[i, COLOUR_PLACES.index((c, p))] = 1
  return y


def _own_above_swap(s: np.ndarray, keys: tuple, pairs: list[tuple]) -> float:
  """Fraction of rows i whose own two labels (a1, b1), (a2, b2) score above the swapped (a2, b1), (a1, b2)."""
  right = 0
  for i, ((a1, b1), (a2, b2)) in enumerate(pairs):
    own = s[i, keys.index((a1, b1))] + s[i, keys.index((a2, b2))]
    swap = s[i, keys.index((a2, b1))] + s[i, keys.index((a1, b2))]
    right += own > swap  # ties count as wrong
  return right / len(pairs)


def binding_accuracy(w: np.ndarray, x: np.ndarray, scenes: list[dict]) -> float:
  """Fraction of two-object scenes whose own two bindings the probe rates above their swap (ties count wrong)."""
  pairs = [tuple((c, s) for _, c, s in sc["objects"]) for sc in scenes]
  return _own_above_swap(_scores(w, x), BINDINGS, pairs)


def place_accuracy(w: np.ndarray, x: np.ndarray, scenes: list[dict]) -> float:
  """Fraction of two-object scenes whose own colour-in-place pairs the probe rates above those of the scene with
  the colours exchanged (ties count wrong)."""
  pairs = [tuple((o[1], p) for o, p in zip(sc["objects"], _places(sc))) for sc in scenes]
  return _own_above_swap(_scores(w, x), COLOUR_PLACES, pairs)


def probe(x_train: np.ndarray, train: list[dict], x_test: np.ndarray, test: list[dict],
          x_same: np.ndarray | None = None, same: list[dict] | None = None) -> dict:
  """{"bag", "bag_chance", "binding", "binding_chance"} of probes fit on (x_train, train), scored on (x_test, test);
  with (x_same, same) — same-shape scenes — also "place", "place_chance"."""
  bag, chance = bag_accuracy(ridge(x_train, bag_targets(train)), x_test, bag_targets(test))
  binding = binding_accuracy(ridge(x_train, binding_targets(train)), x_test, test)
  out = {"bag": bag, "bag_chance": chance, "binding": binding, "binding_chance": 0.5}
  if same is not None:
    out |= {"place": place_accuracy(ridge(x_train, place_targets(train)), x_same, same), "place_chance": 0.5}
  return out


def probes(embed_images: Callable[[list[str]], np.ndarray], embed_texts: Callable[[list[str]], np.ndarray], folder: str,
           n_train: int = 4000, n_test: int = 1000, seed: int = 7) -> dict:
  """{"image": probe(...), "text": probe(...)}: the probes on image embeddings of rendered scenes (cached in
  `folder`) and on text embeddings of their plain captions. `embed_*`: paths / texts → [N, D] embeddings."""
  train, test, same = probe_scenes(n_train, n_test, seed)
  scenes = train + test + same
  paths = render_scenes(scenes, folder, seed)
  cut = (n_train, n_train + n_test)
  img = np.split(embed_images(paths), cut)
  txt = np.split(embed_texts([plain_caption(sc) for sc in scenes]), cut)
  on_images = probe(img[0], train, img[1], test, img[2], same)
  on_texts = probe(txt[0], train, txt[1], test, txt[2], same)
  return {"image": on_images, "text": on_texts}
