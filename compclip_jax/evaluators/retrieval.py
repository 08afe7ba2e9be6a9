"""COCO / Flickr30k Karpathy-test retrieval (METHODS §3): text and image R@1/5/10, captions cleaned (CLIC protocol).
Files: `<data_dir>/retrieval/{coco,flickr30k}_test.json` (Karpathy or BLIP layout)."""
from __future__ import annotations

import os

from compclip_jax.evaluators import scorers
from compclip_jax.evaluators.captions import pre_caption, read_test_captions
from compclip_jax.evaluators.tasks import ImageRef, Index, Task, image_path


def load_retrieval(data_dir: str, image_dir: str, dataset: str) -> Task:
  images, texts = Index(), Index()
  text_image = []
  for rel, caps in read_test_captions(os.path.join(data_dir, "retrieval", f"{dataset}_test.json")):
    i = images.add(ImageRef(image_path(image_dir, dataset, rel)))
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
