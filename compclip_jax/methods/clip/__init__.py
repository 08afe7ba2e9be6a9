"""Plain CLIP fine-tuning (configs/clip.py): one step kind, the symmetric InfoNCE loss (METHODS §1.4, CLIC's CLIP
step on its own). Record → sample → loss:

1. sample (`sample`): the record's image through the model's eval transform (uint8), its first
   sentence;
2. images normalised with the model's own constants; image and text embeddings L2-normalised;
3. loss = ½(CE_i2t + CE_t2i) over the B × B similarity matrix scaled by exp(logit_scale) (methods/clip/losses.py).
"""
from __future__ import annotations

from compclip_jax.data.samples import ImageOptions, model_image
from compclip_jax.methods import base
from compclip_jax.methods.clip import losses
from compclip_jax.models.clip import clip_of


def sample(rec, partner, rng, tagger, opts: ImageOptions) -> dict:
  """CLIC's plain CLIP step (METHODS §1.4) and plain CLIP training: un-concatenated image, first sentence.
  → {"image": uint8 [S, S, 3], "texts": [first sentence]}."""
  del partner, rng, tagger
  return {"image": model_image(rec, opts), "texts": [rec["sentences"][0]]}


def loss(model, batch: dict, rng, norm: tuple, forms: base.SigmoidForms) -> tuple:
  """batch: image uint8 [B, S, S, 3], ids [B, 1, L] → losses.clip_loss. Works on CLIP or READ's CLIP + decoder."""
  del rng
  clip = clip_of(model)
  img = base.image_embeddings(clip, batch, norm)
  return losses.clip_loss(img, clip.encode_text(batch["ids"][:, 0], normalize=True), base.logit_scale(clip),
                          base.logit_bias(clip, forms))


STEP = base.StepKind("clip", sample, loss)
METHOD = base.Method("clip", (STEP,), console_terms=())
