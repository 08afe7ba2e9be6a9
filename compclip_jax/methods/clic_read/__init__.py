"""CLIC + READ's objectives (configs/clic_read.py) — ours: no public code combines them. READ's paper presents its
two text-side objectives as a plug-in for other methods; here they stack on CLIC. One CLIC+READ step, record → loss:

1. sample: CLIC's (methods/clic.py step 1: concatenated pair image, [p1, p2, p3, p4, n]) plus the reconstruction
   target y = p2, which the pipeline tokenises with the T5 tokenizer. Nothing else is drawn, so the images, the texts
   and the random stream are exactly CLIC's.
2. images normalised as CLIC's (ImageNet's constants by default); the 5B texts through the text tower: the pooled
   outputs and their L2-normalised projections [p1; p2; p3; p4; n].
3. CLIC's loss on them (w_cont·L_cont + w_sneg·L_S-Neg + w_uni·L_Uni, losses.clic_loss), plus
   - w_rec·L_rec: READ's frozen T5 decoder reads W·pooled(p1) and reconstructs p2 (losses.token_reconstruction);
   - w_align·L_align: READ's alignment on (p3, p4), each p4 classified among the batch's p3
     (losses.sentence_alignment, `read.align_direction`).

Why p1 → p2: READ reconstructs an *alternative* caption of the same image, not the input. p2 describes the same
concatenated image with the same two facts in the other order (the spatial order is a coin flip, so both orders are
true), so it is an alternative caption whose content is fully determined by p1: the decoder can only succeed if
W·pooled(p1) keeps every object, attribute and relation of both halves — the binding CLIC's swapped negatives probe.
p3 / p4 are also true captions, but with facts p1 does not contain, which makes a noisier target.
Why (p3, p4) for alignment: READ's reference aligned two distinct captions of the same image (its paraphrase file was
never read, METHODS §2.2), which is what p3 and p4 are (two other sentences of each half). (p1, p2) would repeat
CLIC's Uni term, which already pulls p̂1 and p̂2 together.
In the single-image ablation (`clic.concat=False`) p1 = p2, so y is the positive itself (READ lets y = T too).

Alternation with CLIP steps as CLIC's (`clic.clip_every`; the CLIP step is CLIC's "clic_clip"). Model parts: READ's
(CLIP + W + frozen decoder, methods/read/model.py; the decoder exported by `read.export_decoder`). Config sections:
CLIC's `clic` and READ's `read` (`read.w_con` unused), their values in configs/clic_read.py. Trainable: CLIC's
text side + W; the vision tower and the decoder are frozen. Built from the two folders; nothing else knows this
combination exists.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from compclip_jax.methods import base, clic, read
from compclip_jax.methods.clic import config as clic_config
from compclip_jax.methods.clic import losses as clic_losses
from compclip_jax.methods.read import config as read_config
from compclip_jax.methods.read import losses as read_losses
from compclip_jax.models.clip import l2_normalize


def sample(rec, partner, rng, tagger, opts) -> dict:
  """CLIC's sample + {"target": p2} (no extra randomness: CLIC's stream unchanged)."""
  s = clic.sample(rec, partner, rng, tagger, opts)
  return {**s, "target": s["texts"][1]}


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossOptions:
  """CLIC's loss options and READ's (`read.w_con` unused)."""
  clic: clic_config.LossOptions
  read: read_config.LossOptions


def loss_options(c: ml_collections.ConfigDict) -> LossOptions:
  return LossOptions(clic=clic_config.loss_options(c), read=read_config.loss_options(c))


def loss(model, batch: dict, rng, norm: tuple, opts: LossOptions) -> tuple:
  """batch: image [B, S, S, 3], ids [B, 5, L], neg_valid [B], t5_target [B, T5] (p2) → CLIC's loss + w_rec·L_rec
  + w_align·L_align; metrics clic/* and read/rec, read/align."""
  clip = model.clip
  img = base.image_embeddings(clip, batch, norm)
  by_sample = base.per_sample(clip.pooled_text, batch["ids"])  # [B, 5, width]: p1, p2, p3, p4, n
  txt = base.set_major(l2_normalize(clip.project_text(by_sample)))  # [5B, D]: p1 (B); p2; p3; p4; n
  scale = base.logit_scale(clip)
  b = img.shape[0]
  o, r = opts.clic, opts.read
  l_clic, metrics = clic_losses.clic_loss(img, txt, batch["neg_valid"], scale, o.w_cont, o.w_sneg, o.w_uni,
                                          base.logit_bias(clip, o.forms), o.forms.negatives)
  # p1 sample-major, as READ's step reads it (methods/read: no gather of the set-major rows)
  dec_logits = read.reconstruction_logits(model, by_sample[:, 0], batch["t5_target"], rng, r.t5_dropout)
  l_rec = read_losses.token_reconstruction(dec_logits, batch["t5_target"])
  l_align = read_losses.sentence_alignment(txt[3 * b:4 * b], txt[2 * b:3 * b], scale, r.align_direction)
  total = l_clic + r.w_rec * l_rec + r.w_align * l_align
  return total, {**metrics, "loss": total, "read/rec": l_rec, "read/align": l_align}


STEP = base.StepKind("clic_read", sample, loss, loss_options=loss_options, options=clic.options,
                     normalization=clic.normalization, partner=clic.needs_partner, t5_target=True,
                     layout=clic.STEP.layout, min_sentences=clic.STEP.min_sentences)


def _schedule(c) -> tuple[base.StepKind, ...]:
  return clic.cycle(c.clic.clip_every, STEP)


METHOD = base.Method("clic_read", (STEP, clic.CLIP_STEP), console_terms=("cont", "sneg", "uni", "rec", "align"),
                     cycle=_schedule, sections=(clic_config.SECTION, read_config.SECTION),
                     extend_model=read.model.extend_model, export_parts=read.export_parts)
