"""READ (METHODS §2, configs/read.py): hard-negative contrastive + token reconstruction through a frozen T5 v1.1
decoder + paraphrase alignment. One READ step, record → loss:

1. sample (data/samples.read_sample): eval-transform image (alpha dropped first, as READ's collator); a random
   caption T, 3 rule-based swap negatives of T (masked when empty), a paraphrase T' (the paraphrase file, else another
   distinct caption: what the reference ran), and the reconstruction target y, a caption of the same image (METHODS
   §2.2). The pipeline tokenises y with the T5 tokenizer (EOS appended, pad 0), T' with CLIP's.
2. images normalised with the model's constants; texts [T (B); n1; n2; n3 (3B)] through the text tower: the pooled
   output (EOT after the final LN, before text_projection) and its projection, L2-normalised.
3. the frozen decoder reads W·pooled(T) as a length-1 sequence and predicts y from y shifted right (start token 0,
   models/t5.shift_right) — T5 dropout on unless `loss.t5_dropout=False` (the reference leaves it in train mode).
4. loss = w_con·L_con + w_rec·L_rec + w_align·L_align (1, 0.1, 0.5; METHODS §2.3, losses.read_loss).

Model parts: CLIP + W + the frozen decoder (models/read.READModel); `export.t5_decoder` writes the decoder back as an
HF T5 directory (`export_parts`). Trainable (configs/read.py): all of CLIP and W; the decoder is frozen.
"""
from __future__ import annotations

import logging
import os
import shutil

from compclip_jax.methods import losses
from compclip_jax.data import samples
from compclip_jax.methods import base
from compclip_jax.models.clip import l2_normalize
from compclip_jax.models.t5 import shift_right
from compclip_jax.weights import hf


def sample(rec, partner, rng, tagger, opts) -> dict:
  """→ {"image", "texts": [T, n1, n2, n3], "neg_valid": bool [3], "neg_kind": [3], "paraphrase", "target"}."""
  del partner
  return samples.read_sample(rec, rng, tagger, opts)


def reconstruction_logits(model, pooled, targets, rng, loss_cfg):
  """The frozen decoder's logits [B, T5, V] for targets [B, T5] (int, pad 0) given pooled [B, width]."""
  dropout_rng = rng if loss_cfg.t5_dropout else None  # the reference leaves the frozen decoder in train mode
  return model.reconstruct(pooled, shift_right(targets), dropout_rng)


def loss(model, batch: dict, rng, norm: tuple, loss_cfg) -> tuple:
  """batch: image [B, S, S, 3], ids [B, 4, L], neg_valid [B, 3], para_ids [B, L], t5_target [B, T5] →
  losses.read_loss (metrics read/*, con/*)."""
  clip = model.clip
  img = base.image_embeddings(clip, batch, norm)
  pooled = clip.text_model(base.stacked(batch["ids"]))  # [4B, width]
  txt = l2_normalize(clip.text_projection(pooled))
  b = img.shape[0]
  dec_logits = reconstruction_logits(model, pooled[:b], batch["t5_target"], rng, loss_cfg)
  para = clip.encode_text(batch["para_ids"], normalize=True)
  return losses.read_loss(img, txt, batch["neg_valid"], para, dec_logits, batch["t5_target"], base.logit_scale(clip),
                          loss_cfg.w_rec, loss_cfg.w_align, loss_cfg.align_direction, w_con=loss_cfg.w_con)


def export_parts(c, workdir: str, t5_cfg, t5_tokenizer, flat: dict) -> dict:
  """Writes the decoder as an HF T5 directory `<workdir>/export/t5` when `export.t5_decoder`; → CLIP's own flat
  parameters (the `clip.` prefix of READModel removed) for the CLIP exports."""
  if c.export.t5_decoder:
    out = os.path.join(workdir, "export", "t5")
    hf.save_t5_decoder_dir(t5_cfg, {k[len("decoder."):]: v for k, v in flat.items() if k.startswith("decoder.")}, out)
    shutil.copyfile(t5_tokenizer.path, os.path.join(out, "spiece.model"))
    logging.info("exported the T5 decoder: %s", out)
  return {k[len("clip."):]: v for k, v in flat.items() if k.startswith("clip.")}


STEP = base.StepKind("read", sample, loss, t5_target=True, alpha_from_config=False)
METHOD = base.Method("read", (STEP,), console_terms=("con", "rec", "align"), decoder=True, export_parts=export_parts,
                     needs_parse=True, validate=base.decoder_problems)
