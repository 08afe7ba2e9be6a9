"""CLIC (METHODS §1, configs/clic.py): CLIC steps on concatenated image pairs, alternating with plain CLIP steps.

One CLIC step, record → loss:

1. sample (methods/clic/samples.py): record i and a partner j of the same orientation (METHODS §1.2 steps 1–2;
   the pipeline draws j because `partner` says so) are squashed to halves and concatenated into one S × S image in a
   coin-flip order (step 3); five texts [p1, p2, p3, p4, n]: p1 = i.first + j.first, p2 = j.first + i.first, p3 / p4
   two extra sentences of each, n the cross-caption word swap of the first sentences (step 6; `neg_valid` False
   when none could be made). `clic.concat=False` is the single-image ablation (METHODS §1.5).
2. images normalised with ImageNet's constants, as the reference does for every backbone (step 4;
   `clic.imagenet_normalization=False`: the model's own) — `normalization` below.
3. the 5B texts are encoded stacked set by set [p1 (B); p2 (B); p3 (B); p4 (B); n (B)], image and text embeddings
   L2-normalised; s = exp(logit_scale).
4. loss = w_cont·L_cont + w_sneg·L_S-Neg + w_uni·L_Uni (0.5, 0.5, 1; METHODS §1.3, methods/clic/losses.py): contrastive
   over the 4 positive sets, the negative against its own image only, p1 and p2 pulled together.

The CLIP step (METHODS §1.4) is plain CLIP's (methods/clip.py) under its own kind, "clic_clip": the un-concatenated
first image and sentence, symmetric InfoNCE. `clic.clip_every` = n: n CLIC steps, then one CLIP step; 0: CLIC steps only
(`cycle`). All steps read one shuffled order (data/pipeline.py): step g takes global batch g of it.
Trainable / frozen (configs/clic.py): the text side trains, the vision tower and its projection are frozen.
Config section `clic` (methods/clic/config.py), its values in configs/clic.py.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from compclip_jax.data.images import IMAGENET_MEAN, IMAGENET_STD
from compclip_jax.methods import base
from compclip_jax.methods import clip as clip_method
from compclip_jax.methods.clic import config, losses, samples
from compclip_jax.models.clip import clip_of


def options(c: ml_collections.ConfigDict, image_size: int) -> samples.Options:
  s = c.clic
  return samples.Options(image_size=image_size, alpha_premultiplied_resize=bool(c.data.alpha_premultiplied_resize),
                         concat=bool(s.concat), imagenet_normalization=bool(s.imagenet_normalization),
                         shared_words_across_tags=bool(s.shared_words_across_tags),
                         exclude_nonword=bool(s.exclude_nonword))


def needs_partner(opts: samples.Options) -> bool:
  """METHODS §1.2 step 2: a concatenated sample takes a partner record (the single-image ablation does not)."""
  return opts.concat


def sample(rec, partner, rng, tagger, opts: samples.Options) -> dict:
  """→ {"image": uint8 [S, S, 3], "texts": [p1, p2, p3, p4, n or ""], "neg_valid": bool, "neg_kind": str}."""
  return samples.sample(rec, partner, rng, tagger, opts)


def normalization(opts: samples.Options, mean, std) -> tuple[tuple, tuple]:
  """METHODS §1.2 step 4: ImageNet's constants for concatenated images (reference), unless switched off."""
  if opts.concat and opts.imagenet_normalization:
    return IMAGENET_MEAN, IMAGENET_STD
  return tuple(mean), tuple(std)


def encode(model, batch: dict, norm: tuple):
  """→ (img [B, D], txt [5B, D] stacked [p1; p2; p3; p4; n], both L2-normalised fp32, s [])."""
  clip = clip_of(model)
  img = base.image_embeddings(clip, batch, norm)
  txt = base.per_set(lambda ids: clip.encode_text(ids, normalize=True), batch["ids"])
  return img, txt, base.logit_scale(clip)


def stored_scale(model) -> jax.Array:
  """The stored log-scale (`logit_scale`, fp32 []) a step uses: logged as <prefix>/logit_scale, which
  tests/train/test_trajectory_clic.py compares with the reference's, step by step."""
  return clip_of(model).logit_scale[...].astype(jnp.float32).reshape(())


def loss(model, batch: dict, rng, norm: tuple, opts: config.LossOptions) -> tuple:
  """batch: image [B, S, S, 3], ids [B, 5, L], neg_valid [B] → losses.clic_loss (metrics clic/*, clic/logit_scale)."""
  del rng
  img, txt, scale = encode(model, batch, norm)
  total, metrics = losses.clic_loss(img, txt, batch["neg_valid"], scale, opts.w_cont, opts.w_sneg, opts.w_uni,
                                    base.logit_bias(clip_of(model), opts.forms), opts.forms.negatives)
  return total, {**metrics, "clic/logit_scale": stored_scale(model)}


def clip_loss(model, batch: dict, rng, norm: tuple, forms: base.SigmoidForms) -> tuple:
  """The CLIP step's loss: plain CLIP's (methods/clip), and clip/logit_scale."""
  total, metrics = clip_method.loss(model, batch, rng, norm, forms)
  return total, {**metrics, "clip/logit_scale": stored_scale(model)}


STEP = base.StepKind("clic", sample, loss, loss_options=config.loss_options, options=options,
                     normalization=normalization, partner=needs_partner, layout=base.Layout(texts=5, negatives=()),
                     min_sentences=2)
CLIP_STEP = base.StepKind("clic_clip", clip_method.sample, clip_loss)  # model's normalisation, no partner


def cycle(clip_every: int, main: base.StepKind = STEP) -> tuple[base.StepKind, ...]:
  """METHODS §1.4 alternation, one period: `clip_every` CLIC steps then one CLIP step; (main,) when 0."""
  return (main,) * clip_every + (CLIP_STEP,) if clip_every > 0 else (main,)


def _schedule(c) -> tuple[base.StepKind, ...]:
  return cycle(c.clic.clip_every)


METHOD = base.Method("clic", (STEP, CLIP_STEP), console_terms=("cont", "sneg", "uni"), cycle=_schedule,
                     sections=(config.SECTION,))
