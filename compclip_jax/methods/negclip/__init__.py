"""NegCLIP as the CLIC reference runs it (METHODS §1.5 "our NegCLIP", configs/negclip.py). Record → sample → loss:

1. sample (`sample`): eval-transform image, a caption (the first; `negclip.random_caption`: any)
   and its single-sentence swap negative n (two distinct eligible words of one POS swapped; masked when impossible);
2. images normalised with the model's constants; texts [T (B); n (B)] encoded and L2-normalised;
3. loss = ½(i2t + t2i): i2t = CE of each image over [B positives; B negatives] (invalid negatives masked out of the
   denominator), t2i = CE of each positive over the B images (methods/negclip/losses.py). No alternation.
Config section `negclip` (`SECTION`).
"""
from __future__ import annotations

import dataclasses

import ml_collections

from compclip_jax.data import negatives as neg
from compclip_jax.data.samples import ImageOptions, analyses, model_image
from compclip_jax.methods import base
from compclip_jax.methods.negclip import losses
from compclip_jax.models.clip import clip_of

# config.negclip: random_caption — METHODS §1.5 "our NegCLIP" uses the first sentence (False); True draws any
SECTION = base.Section("negclip", ("random_caption",))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options(ImageOptions):
  random_caption: bool = False


def options(c: ml_collections.ConfigDict, image_size: int) -> Options:
  return Options(image_size=image_size, alpha_premultiplied_resize=bool(c.data.alpha_premultiplied_resize),
                 random_caption=bool(c.negclip.random_caption))


def sample(rec, partner, rng, tagger, opts: Options) -> dict:
  """METHODS §1.5 "our NegCLIP": image, a caption (first by default), its single-sentence swap negative.
  → {"image", "texts": [T, n or ""], "neg_valid": bool, "neg_kind": str}."""
  del partner
  k = int(rng.integers(len(rec["sentences"]))) if opts.random_caption else 0
  (a,) = analyses(rec, [k], tagger)
  n = neg.single_swap(a, rng)
  return {
      "image": model_image(rec, opts), "texts": [rec["sentences"][k], n or ""], "neg_valid": n is not None,
      "neg_kind": neg.SINGLE if n is not None else neg.NONE
  }


def loss(model, batch: dict, rng, norm: tuple, forms: base.SigmoidForms) -> tuple:
  """batch: image [B, S, S, 3], ids [B, 2, L], neg_valid [B] → losses.negclip_loss (metrics con/*)."""
  del rng
  clip = clip_of(model)
  img = base.image_embeddings(clip, batch, norm)
  txt = base.per_set(lambda ids: clip.encode_text(ids, normalize=True), batch["ids"])  # [2B, D]
  return losses.negclip_loss(img, txt, batch["neg_valid"], base.logit_scale(clip), base.logit_bias(clip, forms),
                             forms.negatives)


STEP = base.StepKind("negclip", sample, loss, options=options, layout=base.Layout(texts=2, negatives=()))
METHOD = base.Method("negclip", (STEP,), console_terms=(), sections=(SECTION,))
