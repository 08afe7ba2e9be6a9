"""READ's config section, `config.read` (METHODS §2): its checks and the typed options its loss gets. Its values are
set in the recipes that use it (configs/read.py, configs/clic_read.py).

  w_con, w_rec, w_align        METHODS §2.3: w_con·L_con + w_rec·L_rec + w_align·L_align
  align_direction              "para_to_orig" (reference) | "orig_to_para" (the paper's formula) | "both"
  t5_dropout                   the reference leaves the frozen decoder in train mode (dropout on)
  target_may_equal_positive    METHODS §2.2 (reference: True); False draws y from the other captions
  overlapping_swaps            METHODS §2.2: True keeps the reference's garbling overlapping swaps
  proj_init                    W (METHODS §2.1): "torch_linear" = torch nn.Linear's default, uniform ±1/√fan_in
                               (reference); "lecun_normal" = normal with std 1/√fan_in
  export_decoder               also write the decoder as an HF T5 directory (<workdir>/export/t5)
  t5.init / t5.tokenizer       the frozen decoder, an HF T5 v1.1 directory; its SentencePiece model (default
                               t5.init's spiece.model, else the synthetic world's, compclip_jax/assets/)
  t5.random, random_*          a random decoder instead (:runlocal, the demo; v1.1-large is d_model 1024, vocab 32128,
                               24 layers); random_vocab 0: the tokenizer's size
"""
from __future__ import annotations

import dataclasses
import os

import ml_collections

from compclip_jax.methods import base
from compclip_jax.methods.read.losses import ALIGN_DIRECTIONS
from compclip_jax.methods.read.model import PROJ_INITS


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossOptions:
  """What READ's loss reads (METHODS §2.3): its weights, the alignment's direction, the decoder's dropout and how a
  sigmoid family takes its terms."""
  w_con: float
  w_rec: float
  w_align: float
  align_direction: str
  t5_dropout: bool
  forms: base.SigmoidForms


def loss_options(c: ml_collections.ConfigDict) -> LossOptions:
  return base.options_from(LossOptions, c, "read", forms=base.sigmoid_forms(c))


def problems(c: ml_collections.ConfigDict) -> list[str]:
  r, out = c.read, []
  if not r.t5.init and not r.t5.random:
    out.append(f"{c.method} needs read.t5.init: an HF T5 v1.1 directory (e.g. google/t5-v1_1-large downloaded "
               "locally), or read.t5.random=True for a random decoder")
  if r.t5.init and not os.path.isdir(r.t5.init):
    out.append(f"read.t5.init {r.t5.init} is not a directory")
  if r.proj_init not in PROJ_INITS:
    out.append(f"read.proj_init {r.proj_init!r}: use one of {PROJ_INITS}")
  if r.align_direction not in ALIGN_DIRECTIONS:
    out.append(f"read.align_direction {r.align_direction!r}: use one of {ALIGN_DIRECTIONS}")
  return out + base.out_of_range(c, RANGES)


# values that make no sense: negative loss weights; a random decoder of no layers or width
RANGES = (("read.w_con", base.NON_NEGATIVE), ("read.w_rec", base.NON_NEGATIVE), ("read.w_align", base.NON_NEGATIVE),
          ("read.t5.random_layers", base.POSITIVE), ("read.t5.random_d_model", base.POSITIVE),
          ("read.t5.random_vocab", (base.NON_NEGATIVE[0], "≥ 0 (0: the tokenizer's size)")))

KEYS = ("w_con", "w_rec", "w_align", "align_direction", "t5_dropout", "target_may_equal_positive", "overlapping_swaps",
        "proj_init", "export_decoder", "t5")
SECTION = base.Section("read", KEYS, problems, neutral=("read.export_decoder",))
