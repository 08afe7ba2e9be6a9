"""READ (METHODS §2, configs/read.py): hard-negative contrastive + token reconstruction through a frozen T5 v1.1
decoder + paraphrase alignment. One READ step, record → loss:

1. sample (methods/read/samples.py): eval-transform image (alpha dropped first, as READ's collator); a random
   caption T, 3 rule-based swap negatives of T (masked when empty), a paraphrase T' (the paraphrase file, else another
   distinct caption: what the reference ran), and the reconstruction target y, a caption of the same image (METHODS
   §2.2). The pipeline tokenises y with the T5 tokenizer (EOS appended, pad 0), T' with CLIP's.
2. images normalised with the model's constants; texts T, n1, n2, n3 and T' through the text tower in one pass
   (sample-major, [B·5, L]): the pooled output (EOT after the final LN, before text_projection) and its projection,
   L2-normalised.
3. the frozen decoder reads W·pooled(T) as a length-1 sequence and predicts y from y shifted right (start token 0,
   models/t5.shift_right) — T5 dropout on unless `read.t5_dropout=False` (the reference leaves it in train mode).
4. loss = w_con·L_con + w_rec·L_rec + w_align·L_align (1, 0.1, 0.5; METHODS §2.3, methods/read/losses.py).

Model parts: CLIP + W + the frozen decoder (methods/read/model.py); `read.export_decoder` writes the decoder back as
an HF T5 directory (`export_parts`). Trainable (configs/read.py): all of CLIP and W; the decoder is frozen.
Config section `read` (methods/read/config.py), its values in configs/read.py.
"""
from __future__ import annotations

import logging
import os
import shutil

import jax.numpy as jnp
import ml_collections

from compclip_jax.methods import base
from compclip_jax.methods.read import config, losses, model, samples
from compclip_jax.models.clip import l2_normalize
from compclip_jax.models.t5 import shift_right
from compclip_jax.weights import hf


def options(c: ml_collections.ConfigDict, image_size: int) -> samples.Options:
  # READ's reference converts to RGB before its processor resizes: alpha dropped first (the sample does so)
  r = c.read
  return samples.Options(image_size=image_size, alpha_premultiplied_resize=False,
                         target_may_equal_positive=bool(r.target_may_equal_positive),
                         overlapping_swaps=bool(r.overlapping_swaps))


def sample(rec, partner, rng, tagger, opts: samples.Options) -> dict:
  """→ {"image", "texts": [T, n1, n2, n3], "neg_valid": bool [3], "neg_kind": [3], "paraphrase", "target"}."""
  del partner
  return samples.sample(rec, rng, tagger, opts)


def reconstruction_logits(read_model, pooled, targets, rng, t5_dropout: bool):
  """The frozen decoder's logits [B, T5, V] for targets [B, T5] (int, pad 0) given pooled [B, width]."""
  dropout_rng = rng if t5_dropout else None  # the reference leaves the frozen decoder in train mode
  return read_model.reconstruct(pooled, shift_right(targets), dropout_rng)


def loss(read_model, batch: dict, rng, norm: tuple, opts: config.LossOptions) -> tuple:
  """batch: image [B, S, S, 3], ids [B, 4, L], neg_valid [B, 3], para_ids [B, L], t5_target [B, T5] →
  losses.read_loss (metrics read/*, con/*) and read/logit_scale (the stored log-scale this step used)."""
  clip = read_model.clip
  img = base.image_embeddings(clip, batch, norm)
  # the paraphrase rides in the same pass as the four captions: a second pass would read the trained tower's weights
  # again in its forward, rematerialised forward and backward (docs/tpu.md, READ's traffic)
  ids = jnp.concatenate([batch["ids"], batch["para_ids"][:, None]], axis=1)  # [B, 5, L]: T, n1, n2, n3, T'
  by_sample = base.per_sample(clip.pooled_text, ids)  # [B, 5, width]
  emb = l2_normalize(clip.project_text(by_sample))  # [B, 5, D]
  txt, para = base.set_major(emb[:, :4]), emb[:, 4]  # [4B, D], [B, D]
  # the decoder reads the positives sample-major: their rows of the set-major array are not the batch's own shards
  # (XLA gathered them to every device at every decoder layer: docs/tpu.md)
  dec_logits = reconstruction_logits(read_model, by_sample[:, 0], batch["t5_target"], rng, opts.t5_dropout)
  total, metrics = losses.read_loss(img, txt, batch["neg_valid"], para, dec_logits, batch["t5_target"],
                                    base.logit_scale(clip), opts.w_rec, opts.w_align, opts.align_direction,
                                    w_con=opts.w_con, bias=base.logit_bias(clip, opts.forms),
                                    negatives=opts.forms.negatives)
  # the stored log-scale this step used (the trajectory test compares it with the reference's, step by step)
  return total, {**metrics, "read/logit_scale": clip.logit_scale[...].astype(jnp.float32).reshape(())}


def export_parts(c, workdir: str, t5_cfg, t5_tokenizer, flat: dict) -> dict:
  """Writes the decoder as an HF T5 directory `<workdir>/export/t5` when `read.export_decoder`; → CLIP's own flat
  parameters (the `clip.` prefix of READModel removed) for the CLIP exports."""
  if c.read.export_decoder:
    out = os.path.join(workdir, "export", "t5")
    hf.save_t5_decoder_dir(t5_cfg, {k[len("decoder."):]: v for k, v in flat.items() if k.startswith("decoder.")}, out)
    shutil.copyfile(t5_tokenizer.path, os.path.join(out, "spiece.model"))
    logging.info("exported the T5 decoder: %s", out)
  return {k[len("clip."):]: v for k, v in flat.items() if k.startswith("clip.")}


STEP = base.StepKind("read", sample, loss, loss_options=config.loss_options, options=options, t5_target=True,
                     alpha_from_config=False, layout=base.Layout(texts=4, negatives=(3,), paraphrase=True))
METHOD = base.Method("read", (STEP,), console_terms=("con", "rec", "align"), sections=(config.SECTION,),
                     extend_model=model.extend_model, export_parts=export_parts, needs_parse=True)
