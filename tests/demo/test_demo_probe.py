"""The demo's diagnostics (compclip_jax/demo_probe.py) on embeddings whose content is known by construction: features
that encode bindings pass the binding probe, features that encode only the bag of colours and shapes pass the bag
probe and fail the binding probe; ridge regression against numpy's least squares."""
import functools
import json

import numpy as np
import pytest

from compclip_jax.demo import probe as demo_probe
from compclip_jax.data.synthetic import scenes as synthetic


def _binding_features(scenes):  # one-hot of the bindings present: binding-aware by construction
  return demo_probe.binding_targets(scenes)


def _bag_features(scenes):  # one-hot of the colours and the shapes present: a bag of words by construction
  return demo_probe.bag_targets(scenes)


def test_probe_scenes_train_on_training_pairings_and_test_on_held_out_ones():
  train, test, same = demo_probe.probe_scenes(300, 100, seed=3)
  held = synthetic.held_out_pairings()
  assert all(synthetic.pairing_key(*sc["objects"]) not in held for sc in train)
  assert all(synthetic.pairing_key(*sc["objects"]) in held for sc in test + same)
  assert all(sc["objects"][0][2] != sc["objects"][1][2] for sc in test)  # a swap changes the bindings
  assert all(sc["objects"][0][2] == sc["objects"][1][2] for sc in same)  # a swap changes only the places
  assert len(test) == len(same) == 100 and demo_probe.probe_scenes(300, 100, seed=3) == (train, test, same)


def test_ridge_without_penalty_is_least_squares():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(50, 4)), (rng.random((50, 3)) > 0.5).astype(float)
  w = demo_probe.ridge(x, y, lam=0.0)
  ref, *_ = np.linalg.lstsq(np.c_[x, np.ones(50)], 2 * y - 1, rcond=None)
  np.testing.assert_allclose(w, ref, atol=1e-10)


def test_binding_features_pass_both_probes_bag_features_only_the_bag_probe():
  train, test, _ = demo_probe.probe_scenes(2000, 300, seed=1)
  binding = demo_probe.probe(_binding_features(train), train, _binding_features(test), test)
  bag = demo_probe.probe(_bag_features(train), train, _bag_features(test), test)
  assert binding["binding"] > 0.95 and bag["bag"] > 0.95
  # a bag holds nothing that tells a scene's bindings from their swap (the same four words): a linear readout of it
  # guesses from the training scenes' statistics, about as often right as wrong
  assert 0.35 < bag["binding"] < 0.65
  assert 0.5 < bag["bag_chance"] < 1.0 and binding["binding_chance"] == 0.5


def test_place_probe_needs_which_colour_is_where():
  """Same-shape scenes: "a small pink star above a large black star" vs its colour swap differ only in places."""
  train, test, same = demo_probe.probe_scenes(2000, 50, seed=4)
  place = lambda scs: demo_probe.place_targets(scs)  # colour-in-place one-hots: where each colour is
  assert demo_probe.place_targets([same[0]]).sum() == 2  # two colours, two places
  where = demo_probe.probe(place(train), train, place(test), test, place(same), same)
  bag = demo_probe.probe(_bag_features(train), train, _bag_features(test), test, _bag_features(same), same)
  assert where["place"] > 0.95 and 0.3 < bag["place"] < 0.7 and where["place_chance"] == 0.5


def test_bag_accuracy_and_chance_by_hand():
  y = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
  w = np.zeros((2, 2))
  w[1] = [1.0, -1.0]  # bias only: always says label 0 present, label 1 absent
  acc, chance = demo_probe.bag_accuracy(w, np.zeros((4, 1)), y)
  assert acc == (3 / 4 + 3 / 4) / 2 and chance == (3 / 4 + 3 / 4) / 2


def test_probes_render_once_and_pass_embeddings_of_images_collages_and_first_sentences(tmp_path):
  seen = {"paths": []}

  def embed_images(paths):
    seen["paths"].append(paths)
    return np.random.default_rng(0).normal(size=(len(paths), 8))

  def embed_texts(texts):
    seen["texts"] = texts
    return np.random.default_rng(1).normal(size=(len(texts), 8))

  out = demo_probe.probes(embed_images, embed_texts, str(tmp_path / "probe"), n_train=40, n_test=10, seed=2)
  train, test, _ = demo_probe.probe_scenes(40, 10, seed=2)
  singles, collages = seen["paths"]
  # collages: two pairings of the 40 training scenes, then one per held-out scene
  assert len(singles) == 60 and len(collages) == 2 * 20 + 10 and all(p.endswith(".png") for p in singles + collages)
  assert seen["texts"][40] == synthetic.first_sentence(test[0])  # "a small red heart above a large blue star …"
  assert set(out) == {"image", "text"} and 0 <= out["image"]["binding"] <= 1 and 0 <= out["text"]["place"] <= 1
  assert 0 <= out["image"]["collage_binding"] <= 1 and "collage_binding" not in out["text"]
  stamps = [(tmp_path / "probe" / f).stat().st_mtime_ns for f in ("00000.png", "collages/00000.png")]
  demo_probe.probes(embed_images, embed_texts, str(tmp_path / "probe"), n_train=40, n_test=10, seed=2)
  assert [(tmp_path / "probe" / f).stat().st_mtime_ns for f in ("00000.png", "collages/00000.png")] == stamps


def _collage_features(folder, halves, post=lambda x: x):
  """Embeddings of the collages `render_collages` wrote in `folder`, by construction from its record: `post` of the
  sum of `halves(scene)` over the two halves."""
  import json  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel

  def embed(paths):  # called once the collages are written
    pairs = json.load(open(os.path.join(folder, "collages.json")))["pairs"]
    rows = [pairs[int(os.path.basename(p)[:-len(".png")])] for p in paths]
    return post(np.stack([halves([a])[0] + halves([b])[0] for a, b, _ in rows]))

  return embed


@functools.lru_cache(maxsize=None)
def _collage_scenes():
  """The collage tests' scenes (generated once per test process): 1,600 training scenes, 200 held-out ones."""
  return demo_probe.probe_scenes(1600, 200, seed=5)


@pytest.fixture(scope="module")
def collage_folder(tmp_path_factory):
  """One folder for the collage tests' collages of `_collage_scenes` (seed 5): rendered by the first
  `collage_probe` call, read back by every later one (render_collages writes once: its record is checked)."""
  return str(tmp_path_factory.mktemp("collages") / "c")


def test_collage_probe_needs_each_half_to_bind(collage_folder):
  """Collages whose embedding sums each half's bindings pass the collage binding probe; the sum of each half's bag of
  colours and shapes does not (a collage's bag cannot say which colour goes with which shape in which half). The
  images themselves: collages of two scenes of one orientation, CLIC's square of two halves."""
  import os  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  train, test, _ = _collage_scenes()
  folder = collage_folder
  binding = demo_probe.collage_probe(_collage_features(folder, demo_probe.binding_targets), train, test, folder, 5)
  bag = demo_probe.collage_probe(_collage_features(folder, demo_probe.bag_targets), train, test, folder, 5)
  assert binding > 0.95 and 0.3 < bag < 0.7, (binding, bag)
  img = Image.open(os.path.join(folder, "00000.png"))
  assert img.size == (128, 128)


def test_collage_ceiling_is_the_collage_probe_on_the_normalised_sum_of_the_halves(collage_folder):
  """A tower whose collage embedding is exactly the normalised sum of its halves' single-image embeddings reads on
  the collage probe what `collage_ceiling` computes from the single images alone (the same pairs, the same probe);
  a bag of words has no ceiling to speak of."""
  train, test, _ = _collage_scenes()
  rng = np.random.default_rng(0)
  mix = rng.normal(size=(100, 32))  # binding one-hots seen through a random linear map: unit vectors that bind
  noise = lambda sc: np.random.default_rng(list(json.dumps(sc).encode())).normal(size=32)  # per scene, fixed
  halves = lambda scenes: demo_probe.binding_targets(scenes) @ mix + 3.0 * np.stack([noise(sc) for sc in scenes])
  unit = lambda v: v / np.linalg.norm(v, axis=-1, keepdims=True)
  unit_halves = lambda scenes: unit(halves(scenes))
  folder = collage_folder
  superposed = demo_probe.collage_probe(_collage_features(folder, unit_halves, unit), train, test, folder, 5)
  ceiling = demo_probe.collage_ceiling(unit_halves(train), train, unit_halves(test), test, 5)
  assert ceiling == superposed and 0.75 < ceiling < 0.98, (ceiling, superposed)  # noise: a partner matters
  bag = demo_probe.collage_ceiling(demo_probe.bag_targets(train), train, demo_probe.bag_targets(test), test, 5)
  assert 0.3 < bag < 0.7, bag


def test_collage_pairs_are_their_indices():
  train, test, _ = demo_probe.probe_scenes(40, 10, seed=2)
  pairs, test_pairs = demo_probe.collage_pairs(train, test, 2)
  idx, test_idx = demo_probe.collage_pair_indices(40, 10, 2)
  assert pairs == [(train[a], train[b], tall) for a, b, tall in idx] and len(pairs) == 40
  assert test_pairs == [(test[i], train[j], first, tall) for i, j, first, tall in test_idx]
  assert sorted(a for a, _, _ in idx[20:]) != list(range(0, 40, 2))  # the second pairing is shuffled
