"""Plain CLIP fine-tuning (configs/clip.py): one step kind, the symmetric InfoNCE loss (METHODS §1.4, CLIC's CLIP
step on its own). Record → sample → loss:

1. sample (data/samples.clip_sample): the record's image through the model's eval transform (uint8), its first
   sentence;
2. images normalised with the model's own constants; image and text embeddings L2-normalised;
3. loss = ½(CE_i2t + CE_t2i) over the B × B similarity matrix scaled by exp(logit_scale) (losses.clip_loss).
"""
from __future__ import annotations

from compclip_jax.methods import losses
from compclip_jax.data import samples
from compclip_jax.methods import base
from compclip_jax.methods.read.model import clip_of


def sample(rec, partner, rng, tagger, opts) -> dict:
  """→ {"image": uint8 [S, S, 3], "texts": [first sentence]}."""
  del partner, rng, tagger
  return samples.clip_sample(rec, opts)


def loss(model, batch: dict, rng, norm: tuple, loss_cfg) -> tuple:
  """batch: image uint8 [B, S, S, 3], ids [B, 1, L] → losses.clip_loss. Works on CLIP or READ's CLIP + decoder."""
  del rng, loss_cfg
  clip = clip_of(model)
  img = base.image_embeddings(clip, batch, norm)
  return losses.clip_loss(img, clip.encode_text(batch["ids"][:, 0], normalize=True), base.logit_scale(clip))


STEP = base.StepKind("clip", sample, loss)
METHOD = base.Method("clip", (STEP,), console_terms=())
