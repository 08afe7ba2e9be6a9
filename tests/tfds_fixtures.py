"""Tiny TFDS datasets the tests build offline, without TensorFlow: `coco_captions/2014:1.1.0` with exactly the
registered builder's name, version, config and features (made from the COCO-style JSON fixture, so both paths read
the same images and captions), and a dense-caption dataset (one multi-sentence caption per image, CLIC's data)."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import tensorflow_datasets as tfds

from tests.data_fixtures import caption, extra, write_coco_json, write_images

COCO_NAME = "coco_captions/2014:1.1.0"
DENSE_NAME = "dense_captions:1.0.0"


def _coco_features():
  """coco_captions' features as tensorflow_datasets/object_detection/coco{,_captions}.py declare them."""
  return tfds.features.FeaturesDict({
      "image": tfds.features.Image(encoding_format="jpeg"),
      "image/filename": tfds.features.Text(),
      "image/id": np.int64,
      "objects": tfds.features.Sequence({
          "id": np.int64, "area": np.int64, "bbox": tfds.features.BBoxFeature(),
          "label": tfds.features.ClassLabel(num_classes=80), "is_crowd": np.bool_
      }),
      "captions": tfds.features.Sequence({"text": np.str_, "id": np.int64}),
  })


class CocoCaptions(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """coco_captions/2014 at 1.1.0, its examples from a Karpathy-style JSON and its image folder."""
  name = "coco_captions"
  VERSION = tfds.core.Version("1.1.0")
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="2014")]

  def __init__(self, *, karpathy: pathlib.Path, image_root: pathlib.Path, **kw):
    self.karpathy, self.image_root = karpathy, image_root
    super().__init__(**kw)

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=_coco_features())

  def _split_generators(self, dl_manager):
    del dl_manager
    images = json.loads(self.karpathy.read_text())["images"]
    return {
        s: self._generate_examples([e for e in images if e.get("split") == s])
        for s in ("train", "val", "test", "restval")
    }

  def _generate_examples(self, entries):
    for e in entries:
      path = self.image_root / e["filepath"] / e["filename"]
      if not path.exists():  # a missing file cannot be in a TFDS dataset
        continue
      caps = [{"text": s["raw"], "id": 10 * e["cocoid"] + k} for k, s in enumerate(e["sentences"])]
      yield str(e["cocoid"]), {
          "image": path.read_bytes(), "image/filename": e["filename"], "image/id": e["cocoid"], "objects": [],
          "captions": caps
      }


class DenseCaptions(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """One dense caption per image (several sentences in one text), as PixelProse-style data comes."""
  name = "dense_captions"
  VERSION = tfds.core.Version("1.0.0")

  def __init__(self, *, root: pathlib.Path, n: int, seed: int, **kw):
    self.root, self.n, self.seed = root, n, seed
    super().__init__(**kw)

  def _info(self):
    return tfds.core.DatasetInfo(
        builder=self, features=tfds.features.FeaturesDict({
            "jpeg": tfds.features.Image(encoding_format="jpeg"), "key": tfds.features.Text(),
            "caption": tfds.features.Text()
        }))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    rng = np.random.default_rng(self.seed)
    for name in write_images(self.root, self.n, self.seed):
      text = ". ".join([caption(rng).capitalize()] + [extra(rng) for _ in range(int(rng.integers(2, 4)))]) + "."
      yield name, {"jpeg": (self.root / name).read_bytes(), "key": name, "caption": text}


def build(builder) -> None:
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(verify_ssl=False))


def write_coco_captions(tmp: pathlib.Path, n: int = 24, seed: int = 0, broken: bool = True):
  """→ (TFDS data_dir, Karpathy JSON path, image root, paraphrases path): one COCO fixture in both layouts."""
  karpathy, root, paras, _ = write_coco_json(tmp, n, seed, broken)
  data_dir = tmp / "tfds"
  build(CocoCaptions(karpathy=karpathy, image_root=root, data_dir=str(data_dir), file_format="array_record"))
  return data_dir, karpathy, root, paras


def write_dense_captions(tmp: pathlib.Path, n: int = 24, seed: int = 0) -> pathlib.Path:
  data_dir = tmp / "tfds"
  build(DenseCaptions(root=tmp / "dense_images", n=n, seed=seed, data_dir=str(data_dir), file_format="array_record"))
  return data_dir
