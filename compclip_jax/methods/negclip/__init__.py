"""NegCLIP as the CLIC reference runs it (METHODS §1.5 "our NegCLIP", configs/negclip.py). Record → sample → loss:

1. sample (data/samples.negclip_sample): eval-transform image, a caption (the first; `negclip_random_caption`: any)
   and its single-sentence swap negative n (two distinct eligible words of one POS swapped; masked when impossible);
2. images normalised with the model's constants; texts [T (B); n (B)] encoded and L2-normalised;
3. loss = ½(i2t + t2i): i2t = CE of each image over [B positives; B negatives] (invalid negatives masked out of the
   denominator), t2i = CE of each positive over the B images (losses.negclip_loss). No alternation.
"""
from __future__ import annotations

from compclip_jax.methods import losses
from compclip_jax.data import samples
from compclip_jax.methods import base
from compclip_jax.methods.read.model import clip_of


def sample(rec, partner, rng, tagger, opts) -> dict:
  """→ {"image", "texts": [T, n or ""], "neg_valid": bool, "neg_kind": str}."""
  del partner
  return samples.negclip_sample(rec, rng, tagger, opts)


def loss(model, batch: dict, rng, norm: tuple, loss_cfg) -> tuple:
  """batch: image [B, S, S, 3], ids [B, 2, L], neg_valid [B] → losses.negclip_loss (metrics con/*)."""
  del rng, loss_cfg
  clip = clip_of(model)
  img = base.image_embeddings(clip, batch, norm)
  txt = clip.encode_text(base.stacked(batch["ids"]), normalize=True)  # [2B, D]
  return losses.negclip_loss(img, txt, batch["neg_valid"], base.logit_scale(clip))


STEP = base.StepKind("negclip", sample, loss)
METHOD = base.Method("negclip", (STEP,), console_terms=())
