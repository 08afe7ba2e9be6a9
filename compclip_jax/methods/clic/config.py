"""CLIC's config section, `config.clic` (METHODS §1), its checks, and the reference recipe (METHODS §1.4)."""
from __future__ import annotations

import ml_collections

from compclip_jax.methods import base

# Parameter-rule regexes (matched against dotted parameter paths): CLIC trains the text side (a SigLIP's logit_bias
# with it, as its logit_scale).
TEXT = (r"text_model\..*", r"text_projection\..*", r"logit_scale", r"logit_bias")
VISION = (r"vision_model\..*", r"visual_projection\..*")


def defaults() -> dict:
  return dict(
      clip_every=1,  # METHODS §1.4 alternation: 1 → CLIC, CLIP, CLIC, …; n → n CLIC steps then one CLIP step; 0 → none
      # METHODS §1.3 loss weights: w_cont·L_cont + w_sneg·L_S-Neg + w_uni·L_Uni
      w_cont=0.5,
      w_sneg=0.5,
      w_uni=1.0,
      concat=True,  # False: METHODS §1.5 single-image ablation (p1 = p2, single-sentence swap, no Uni)
      # METHODS §1.2 step 4: concatenated images normalised with ImageNet's constants whatever the backbone
      # (reference); False uses the model's own (CLIP steps always use the model's)
      imagenet_normalization=True,
      # METHODS §1.2 step 6, docs/fidelity.md: shared words removed tag by tag (reference; True: under every tag);
      # tokens without a word character are no swap candidates (fix)
      shared_words_across_tags=False,
      exclude_nonword=True)


def problems(c: ml_collections.ConfigDict) -> list[str]:
  out = []
  if not isinstance(c.clic.clip_every, int) or c.clic.clip_every < 0:
    out.append(f"clic.clip_every {c.clic.clip_every!r}: an integer ≥ 0 (0: no CLIP steps)")
  return out + base.out_of_range(c, tuple((f"clic.{w}", base.NON_NEGATIVE) for w in ("w_cont", "w_sneg", "w_uni")))


RENAMED = (("clip_every", "clic.clip_every"), ("loss.w_cont", "clic.w_cont"), ("loss.w_sneg", "clic.w_sneg"),
           ("loss.w_uni", "clic.w_uni"), ("data.clic_concat", "clic.concat"), ("data.clic_imagenet_normalization",
                                                                               "clic.imagenet_normalization"),
           ("data.clic_shared_words_across_tags", "clic.shared_words_across_tags"), ("data.clic_exclude_nonword",
                                                                                     "clic.exclude_nonword"))
# the alternation shapes every pipeline's share of the data order: a checkpoint cannot continue with another
SECTION = base.Section("clic", defaults, problems, renamed=RENAMED, fixed=("clic.clip_every",),
                       renamed_values=(("optim.schedule", "clic", "warmup_frac_cosine"),))


def recipe(c: ml_collections.ConfigDict) -> None:
  """The reference's recipe (METHODS §1.4): text side trained, vision frozen; AdamW lr 1e-6, β (0.9, 0.98), wd 0.1
  on ≥2-D weights; warm-up 1e-7 → 1e-6 over 20 % then cosine to 1e-8; global batch 800 (4 GPUs × 200); 1 epoch."""
  c.batch_size = 800
  c.num_epochs = 1.0
  c.optim.schedule, c.optim.lr, c.optim.start_lr, c.optim.end_lr = "warmup_frac_cosine", 1e-6, 1e-7, 1e-8
  c.optim.warmup_frac = 0.2
  c.optim.b1, c.optim.b2, c.optim.eps, c.optim.weight_decay, c.optim.grad_clip = 0.9, 0.98, 1e-8, 0.1, 0.0
  c.optim.trainable, c.optim.frozen = TEXT, VISION
