"""CLIC's config section, `config.clic` (METHODS §1): its checks and the typed options its loss gets. Its values are
set in the recipes that use it (configs/clic.py, configs/clic_read.py).

  clip_every                 METHODS §1.4 alternation: 1 → CLIC, CLIP, CLIC, …; n → n CLIC steps then one CLIP step;
                             0 → CLIC steps only
  w_cont, w_sneg, w_uni      METHODS §1.3 loss weights: w_cont·L_cont + w_sneg·L_S-Neg + w_uni·L_Uni
  concat                     False: the single-image ablation (METHODS §1.5: p1 = p2, single-sentence swap, no Uni)
  imagenet_normalization     METHODS §1.2 step 4: concatenated images normalised with ImageNet's constants whatever
                             the backbone (reference); False: the model's own (CLIP steps always use the model's)
  shared_words_across_tags   METHODS §1.2 step 6, docs/fidelity.md: False removes shared words tag by tag (reference)
  exclude_nonword            tokens without a word character are no swap candidates (our fix; False: reference)
"""
from __future__ import annotations

import dataclasses

import ml_collections

from compclip_jax.methods import base


@dataclasses.dataclass(frozen=True, kw_only=True)
class LossOptions:
  """What CLIC's loss reads (METHODS §1.3): its weights and how a sigmoid family takes its terms."""
  w_cont: float
  w_sneg: float
  w_uni: float
  forms: base.SigmoidForms


def loss_options(c: ml_collections.ConfigDict) -> LossOptions:
  return base.options_from(LossOptions, c, "clic", forms=base.sigmoid_forms(c))


def problems(c: ml_collections.ConfigDict) -> list[str]:
  out = []
  if not isinstance(c.clic.clip_every, int) or c.clic.clip_every < 0:
    out.append(f"clic.clip_every {c.clic.clip_every!r}: an integer ≥ 0 (0: no CLIP steps)")
  return out + base.out_of_range(c, tuple((f"clic.{w}", base.NON_NEGATIVE) for w in ("w_cont", "w_sneg", "w_uni")))


KEYS = ("clip_every", "w_cont", "w_sneg", "w_uni", "concat", "imagenet_normalization", "shared_words_across_tags",
        "exclude_nonword")
# the alternation shapes every pipeline's share of the data order: a checkpoint cannot continue with another
SECTION = base.Section("clic", KEYS, problems, fixed=("clic.clip_every",))
