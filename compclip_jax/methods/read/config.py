"""READ's config section, `config.read` (METHODS §2), its checks, and the reference recipe (METHODS §2.4)."""
from __future__ import annotations

import os

import ml_collections

from compclip_jax.methods import base
from compclip_jax.methods.read.losses import ALIGN_DIRECTIONS
from compclip_jax.methods.read.model import PROJ_INITS


def defaults() -> dict:
  return dict(
      # METHODS §2.3: w_con·L_con + w_rec·L_rec + w_align·L_align
      w_con=1.0,
      w_rec=0.1,
      w_align=0.5,
      align_direction="para_to_orig",
      t5_dropout=True,  # the reference leaves the frozen decoder in train mode (dropout on)
      target_may_equal_positive=True,  # METHODS §2.2 (reference); False draws y from the other captions
      overlapping_swaps=False,  # METHODS §2.2: True keeps the reference's garbling overlapping swaps
      # W (METHODS §2.1): "torch_linear" = torch nn.Linear's default, uniform ±1/√fan_in (reference);
      # "lecun_normal" = normal with std 1/√fan_in (old, √3 larger)
      proj_init="torch_linear",
      export_decoder=False,  # also write the decoder as an HF T5 directory (<workdir>/export/t5)
      # the frozen decoder: t5.init, an HF T5 v1.1 directory; or t5.random, a random one of random_* (:runlocal, the
      # demo; v1.1-large is d_model 1024, vocab 32128, 24 layers). t5.tokenizer: a SentencePiece .model, default
      # t5.init's spiece.model, else the one shipped for the synthetic world (compclip_jax/assets/).
      t5=dict(init="", tokenizer="", random=False, random_layers=2, random_d_model=64, random_vocab=0))


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


def runlocal(c: ml_collections.ConfigDict) -> None:
  c.read.t5.random = True  # a tiny random decoder


RENAMED = (("loss.w_con", "read.w_con"), ("loss.w_rec", "read.w_rec"), ("loss.w_align", "read.w_align"),
           ("loss.align_direction", "read.align_direction"), ("loss.t5_dropout", "read.t5_dropout"),
           ("data.read_target_may_equal_positive", "read.target_may_equal_positive"),
           ("data.read_overlapping_swaps", "read.overlapping_swaps"), ("model.read_proj_init", "read.proj_init"),
           ("export.t5_decoder", "read.export_decoder"), ("t5.", "read.t5."))
SECTION = base.Section("read", defaults, problems, renamed=RENAMED, runlocal=runlocal, neutral=("read.export_decoder",),
                       renamed_values=(("optim.schedule", "read", "warmup_steps_cosine"),))


def recipe(c: ml_collections.ConfigDict) -> None:
  """The reference's recipe (METHODS §2.4): all of CLIP and W train, the decoder is frozen; AdamW lr 1e-5, β (0.9,
  0.999), wd 0.1 on everything but biases and LayerNorm weights; 50 warm-up steps then cosine to 0; clip 1.0; batch
  256; 5 epochs on Karpathy `train` only."""
  c.data.source = "coco"
  c.data.splits = ("train",)  # METHODS §2.2: train only (~83k images), not train + restval (~113k)
  # The reference tokenises with transformers' CLIPTokenizerFast (via CLIPProcessor): NFC, whitespace, lower-case,
  # no ftfy / html cleaning — our `data.clean_text=False` path (CLIC's open_clip tokenizer cleans: True there).
  c.data.clean_text = False
  c.batch_size = 256
  c.num_epochs = 5.0
  c.optim.schedule, c.optim.lr, c.optim.warmup_steps = "warmup_steps_cosine", 1e-5, 50
  c.optim.b1, c.optim.b2, c.optim.eps, c.optim.weight_decay, c.optim.grad_clip = 0.9, 0.999, 1e-8, 0.1, 1.0
  c.optim.trainable = (r"clip\..*", r"proj\.kernel")
  c.optim.frozen = (r"decoder\..*",)
  # everything decays except biases and LayerNorm weights (embeddings, logit_scale, W included) — METHODS §2.4
  c.optim.decay = (r".*\.(kernel|embedding)", r"clip\.logit_scale", r".*class_embedding", r".*\.in_proj_weight",
                   r".*\.head\.probe")
  # a SigLIP's (docs/siglip.md): its pooling head's fused q/k/v weight and probe decay as weights and embeddings do;
  # its in_proj_bias and logit_bias are biases
  c.optim.no_decay = (r".*\.(bias|scale)", r".*\.in_proj_bias", r"clip\.logit_bias")
