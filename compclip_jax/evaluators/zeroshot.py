"""Zero-shot classification (METHODS §3): class prompts from templates, averaged and re-normalised per class.

Layout: `<image_dir>/<dataset>/<class folder>/*` (ImageNet style, classes in sorted folder order); optional
`<data_dir>/<dataset>/classnames.txt` (one readable name per line, in the same order) and `templates.txt`
(one template with `{}` per line); default templates: the 80 OpenAI ImageNet prompts.
"""
from __future__ import annotations

import os

import numpy as np

from compclip_jax.errors import InputError
from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.tasks import ImageRef, Index, Task

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".JPEG")
OPENAI_IMAGENET_TEMPLATES = tuple(f"{t}." if not t.endswith(".") else t for t in """a bad photo of a {}|a photo of
many {}|a sculpture of a {}|a photo of the hard to see {}|a low resolution photo of the {}|a rendering of a {}|graffiti
of a {}|a bad photo of the {}|a cropped photo of the {}|a tattoo of a {}|the embroidered {}|a photo of a hard to see
{}|a bright photo of a {}|a photo of a clean {}|a photo of a dirty {}|a dark photo of the {}|a drawing of a {}|a photo
of my {}|the plastic {}|a photo of the cool {}|a close-up photo of a {}|a black and white photo of the {}|a painting
of the {}|a painting of a {}|a pixelated photo of the {}|a sculpture of the {}|a bright photo of the {}|a cropped photo
of a {}|a plastic {}|a photo of the dirty {}|a jpeg corrupted photo of a {}|a blurry photo of the {}|a photo of the
{}|a good photo of the {}|a rendering of the {}|a {} in a video game|a photo of one {}|a doodle of a {}|a close-up
photo of the {}|a photo of a {}|the origami {}|the {} in a video game|a sketch of a {}|a doodle of the {}|a origami
{}|a low resolution photo of a {}|the toy {}|a rendition of the {}|a photo of the clean {}|a photo of a large {}|a
rendition of a {}|a photo of a nice {}|a photo of a weird {}|a blurry photo of a {}|a cartoon {}|art of a {}|a sketch
of the {}|a embroidered {}|a pixelated photo of a {}|itap of the {}|a jpeg corrupted photo of the {}|a good photo of a
{}|a plushie {}|a photo of the nice {}|a photo of the small {}|a photo of the weird {}|the cartoon {}|art of the {}|a
drawing of the {}|a photo of the large {}|a black and white photo of a {}|the plushie {}|a dark photo of a {}|itap of
a {}|graffiti of the {}|a toy {}|itap of my {}|a photo of a cool {}|a photo of a small {}|a tattoo of the
{}""".replace("\n", " ").split("|"))
assert len(OPENAI_IMAGENET_TEMPLATES) == 80


def _lines(path: str) -> list[str] | None:
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return [line.strip() for line in f if line.strip()]


def load_zeroshot(data_dir: str, image_dir: str, dataset: str) -> Task:
  root = os.path.join(image_dir, dataset)
  if not os.path.isdir(root):
    raise FileNotFoundError(f"zero-shot image folder {root} not found (expected one sub-folder per class)")
  folders = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
  names = _lines(os.path.join(data_dir, dataset, "classnames.txt")) or [d.replace("_", " ") for d in folders]
  if len(names) != len(folders):
    raise InputError(f"{dataset}: {len(names)} class names for {len(folders)} class folders")
  templates = _lines(os.path.join(data_dir, dataset, "templates.txt")) or list(OPENAI_IMAGENET_TEMPLATES)
  images, texts = Index(), Index()
  rows = []  # (image, class)
  for c, d in enumerate(folders):
    for f in sorted(os.listdir(os.path.join(root, d))):
      if f.endswith(IMAGE_SUFFIXES):
        rows.append((images.add(ImageRef(os.path.join(root, d, f))), c))
  prompts = [[texts.add(t.format(n)) for t in templates] for n in names]

  def score(img, txt, tie):
    cls = np.stack([txt[p].mean(0) for p in prompts])
    cls /= np.linalg.norm(cls, axis=-1, keepdims=True)
    logits = img[[i for i, _ in rows]] @ cls.T
    labels = [c for _, c in rows]
    return {
        "acc1": scorers.topk_accuracy(logits, labels, 1, tie),
        "acc5": scorers.topk_accuracy(logits, labels, min(5, len(names)), tie), "count": len(labels)
    }

  return Task(dataset, images, texts, score, task="zeroshot_classification", examples=(rows,))
