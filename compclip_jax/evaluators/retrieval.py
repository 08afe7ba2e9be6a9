"""COCO / Flickr30k Karpathy-test retrieval (METHODS §3): text and image R@1/5/10, captions cleaned (CLIC protocol).
Files: `<data_dir>/retrieval/{coco,flickr30k}_test.json` (Karpathy or BLIP layout), or a TFDS split
(`load_retrieval_tfds`: `coco_captions/2014:1.1.0` split `test` is the Karpathy test set)."""
from __future__ import annotations

import os
from typing import Sequence

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.captions import pre_caption, read_test_captions
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path

# coco_retrieval read from TFDS: (dataset, split, image key, captions key); Flickr30k has no TFDS build with captions
TFDS_DEFAULTS = {"coco": ("coco_captions/2014:1.1.0", "test", "image", "captions/text")}


def load_retrieval(data_dir: str, image_dir: str, dataset: str) -> Task:
  pairs = [(ImageRef(image_path(image_dir, dataset, rel)), caps)
           for rel, caps in read_test_captions(os.path.join(data_dir, "retrieval", f"{dataset}_test.json"))]
  return _task(dataset, pairs)


class _TfdsImage:
  """The encoded image of record `index` of a TFDS split (an `ImageRef.read`); hashable by (split, index)."""
  def __init__(self, source, index: int):
    self.source, self.index = source, index

  def __call__(self) -> bytes:
    return bytes(self.source.image_bytes(self.index))

  def __eq__(self, other):
    return isinstance(other, _TfdsImage) and (self.source.path, self.source.split, self.index) == \
        (other.source.path, other.source.split, other.index)

  def __hash__(self):
    return hash((self.source.path, self.source.split, self.index))


def load_retrieval_tfds(name: str, data_dir: str, dataset: str = "coco", split: str = "test", image_key: str = "image",
                        captions_key: str = "captions/text") -> Task:
  """The same task as `load_retrieval`, its images and captions read from split `split` of TFDS dataset `name`
  (data/tfds_source.py; no TensorFlow). Images are named `<name> <split>[<index>] (<image/filename>)`."""
  from compclip_jax.data.tfds_source import TfdsSource  # pylint: disable=import-outside-toplevel
  src = TfdsSource(name, data_dir, split, image_key, captions_key, id_key="")
  pairs = []
  for i in range(len(src)):
    label, caps = src.label_and_captions(i)
    pairs.append((ImageRef(f"{name} {split}[{i}] ({label})", read=_TfdsImage(src, i)), caps))
  return _task(dataset, pairs)


def check_tfds(name: str, data_dir: str, dataset: str = "coco") -> list[str]:
  """The problems of reading retrieval from TFDS `name` in `data_dir` (the split and features of `TFDS_DEFAULTS`),
  found by opening the split (its metadata only): [] or one line."""
  from compclip_jax.data.tfds_source import TfdsError, TfdsSource  # pylint: disable=import-outside-toplevel
  _, split, image_key, captions_key = TFDS_DEFAULTS[dataset]
  try:
    TfdsSource(name, data_dir, split, image_key, captions_key, id_key="")
  except TfdsError as e:
    return [str(e)]
  return []


def _task(dataset: str, pairs: Sequence[tuple[ImageRef, list[str]]]) -> Task:
  images, texts = Index(), Index()
  text_image = []
  for ref, caps in pairs:
    i = images.add(ref)
    for c in caps:
      # duplicates are kept as separate queries (each caption is one query), so index them by (image, caption)
      texts.add((i, pre_caption(c)))
      text_image.append(i)
  captions = Index()
  caption_rows = [captions.add(c) for _, c in texts.items]

  def score(img, txt, tie):
    sim = img @ txt[caption_rows].T  # [N_img, N_queries]
    return scorers.recall_at_k(sim, text_image, (1, 5, 10), tie) | {"images": len(images), "texts": len(text_image)}

  return Task(f"{dataset}_retrieval", images, captions, score, task="zeroshot_retrieval")
