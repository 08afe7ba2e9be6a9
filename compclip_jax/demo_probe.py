"""Diagnostics of a CLIP on the synthetic world (docs/demo.md): what its frozen embeddings carry.

- *bag probe*: a linear probe (ridge regression on ±1 targets) from an embedding to which colours and which shapes
  a scene holds (10 labels); per-label accuracy, chance = the majority rate of each label;
- *binding probe*: a linear probe from an embedding to which (colour, shape) bindings a scene holds (25 labels),
  scored on held-out two-object scenes of two different shapes: correct when the probe rates the scene's own two
  bindings above their swap ({red square, blue circle} vs {blue square, red circle}); chance 50 %.
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

from compclip_jax import synthetic

COLOURS, SHAPES = tuple(synthetic.COLORS), synthetic.SHAPES
BINDINGS = tuple((c, s) for c in COLOURS for s in SHAPES)


def probe_scenes(n_train: int, n_test: int, seed: int) -> tuple[list[dict], list[dict]]:
  """n_train training-world scenes (one or two objects) and n_test held-out-pairing scenes of two shapes that
  differ (where a swap changes the bindings)."""
  rng = np.random.default_rng(seed)
  held = synthetic.held_out_pairings()
  train = [synthetic.scene(rng, held) for _ in range(n_train)]
  test = []
  while len(test) < n_test:
    sc = synthetic.scene(rng, held, benchmark=True)
    if sc["objects"][0][2] != sc["objects"][1][2]:
      test.append(sc)
  return train, test


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


def binding_accuracy(w: np.ndarray, x: np.ndarray, scenes: list[dict]) -> float:
  """Fraction of two-object scenes whose own two bindings the probe rates above their swap (ties count wrong)."""
  s = _scores(w, x)
  right = 0
  for i, sc in enumerate(scenes):
    (_, c1, s1), (_, c2, s2) = sc["objects"]
    own = s[i, BINDINGS.index((c1, s1))] + s[i, BINDINGS.index((c2, s2))]
    swap = s[i, BINDINGS.index((c2, s1))] + s[i, BINDINGS.index((c1, s2))]
    right += own > swap
  return right / len(scenes)


def probe(x_train: np.ndarray, train: list[dict], x_test: np.ndarray, test: list[dict]) -> dict:
  """{"bag", "bag_chance", "binding", "binding_chance"} of probes fit on (x_train, train), scored on (x_test, test)."""
  bag, chance = bag_accuracy(ridge(x_train, bag_targets(train)), x_test, bag_targets(test))
  binding = binding_accuracy(ridge(x_train, binding_targets(train)), x_test, test)
  return {"bag": bag, "bag_chance": chance, "binding": binding, "binding_chance": 0.5}


def probes(embed_images: Callable[[list[str]], np.ndarray], embed_texts: Callable[[list[str]], np.ndarray], folder: str,
           n_train: int = 4000, n_test: int = 1000, seed: int = 7) -> dict:
  """{"image": probe(...), "text": probe(...)}: the probes on image embeddings of rendered scenes (cached in
  `folder`) and on text embeddings of their plain captions. `embed_*`: paths / texts → [N, D] embeddings."""
  train, test = probe_scenes(n_train, n_test, seed)
  paths = render_scenes(train + test, folder, seed)
  img = embed_images(paths)
  txt = embed_texts([plain_caption(sc) for sc in train + test])
  on_images = probe(img[:n_train], train, img[n_train:], test)
  on_texts = probe(txt[:n_train], train, txt[n_train:], test)
  return {"image": on_images, "text": on_texts}
