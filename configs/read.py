r"""READ (METHODS §2; arXiv 2510.16540): a hard-negative contrastive loss plus two text-side objectives — a frozen
T5 v1.1 decoder reconstructs an alternative caption from the text embedding, paraphrases embed together. All of CLIP
and the projection W train; the decoder is frozen.

  python -m compclip_jax.main --config=configs/read.py --workdir=DIR --config.model.init=CHECKPOINT \
      --config.read.t5.init=T5_V1_1_LARGE_DIR --config.data.path=dataset_coco.json --config.data.image_root=COCO

Arguments (`--config=configs/read.py:ARG`, comma-separated):
  runlocal        a tiny random model and decoder on the generated world, a minute on a laptop CPU
  demo            the fine-tuning stage of the synthetic-world demo (python -m compclip_jax.demo)
  model=B/32      a random model of that architecture (B/32, B/16, L/14): the TPU compile check, the benchmarks
  family=siglip   with runlocal / demo: a tiny SigLIP instead of a tiny CLIP
"""
from compclip_jax.train import config as common


def get_config(arg: str = ""):
  arg = common.parse_arg(arg, "read", runlocal=False, demo=False, model="", family="")
  c = common.base("read")

  # Precision: bf16 mixed precision as the reference's bf16 autocast — matmuls and activations bf16; softmax,
  # layer-norm statistics, logits and losses fp32; trained parameters, gradients and AdamW state fp32
  # (docs/training.md); frozen parts stored bf16; the text tower rematerialised (the reference trains with gradient
  # checkpointing)
  c.model.compute_dtype = "bfloat16"
  c.model.frozen_dtype = "bfloat16"
  c.model.attention = "auto"  # the fused Pallas kernel on a TPU (scores stay on chip), cuDNN on a GPU, XLA elsewhere
  c.model.pad_tokens_to = 16  # 77 tokens run as 80: exact, and no layout copy per projection on a TPU (docs/tpu.md)
  c.model.remat_text = True

  # Data (METHODS §2.2): COCO captions, Karpathy `train` only (~83k images, not train + restval)
  c.data.source = "coco"
  c.data.splits = ("train",)
  # the reference tokenises with transformers' CLIPTokenizerFast: no ftfy / html cleaning
  c.data.clean_text = False

  # Batch and steps (METHODS §2.4): batch 256 on one GPU, 5 epochs
  c.batch_size = 256
  c.num_epochs = 5.0
  c.total_steps = 0  # 0: from num_epochs × records / batch_size
  c.drop_last = False  # ⌈num_epochs × records / batch_size⌉ steps

  # Schedule and optimiser (METHODS §2.4): 50 warm-up steps to 1e-5, cosine to 0; AdamW β (0.9, 0.999), ε 1e-8,
  # weight decay 0.1 on everything but biases and LayerNorm weights; gradient-norm clipping at 1.0
  c.optim = dict(
      schedule="warmup_steps_cosine",
      lr=1e-5,
      warmup_steps=50,
      reference_warmup_cosine=False,  # read by warmup_frac_cosine only
      start_lr=1e-7,
      end_lr=1e-8,
      warmup_frac=0.2,  # read by warmup_frac_cosine only
      b1=0.9,
      b2=0.999,
      eps=1e-8,
      weight_decay=0.1,
      grad_clip=1.0,
      clamp_logit_scale=False,
      fp32_decay_factor=True,  # the decay as torch's AdamW rounds it: train/optim.py torch_decay_and_rate
      # what trains: all of CLIP (READ's model wraps it: `clip.`) and W (`proj`); the decoder is frozen
      trainable=(r"clip\..*", r"proj\.kernel"),
      frozen=(r"decoder\..*",),
      # embeddings, logit_scale and W decay too; a SigLIP's pooling-head weight and probe decay, its
      # in_proj_bias and logit_bias do not (docs/siglip.md)
      decay=(r".*\.(kernel|embedding)", r"clip\.logit_scale", r".*class_embedding", r".*\.in_proj_weight",
             r".*\.head\.probe"),
      no_decay=(r".*\.(bias|scale)", r".*\.in_proj_bias", r"clip\.logit_bias"))

  # READ (METHODS §2.1–2.3; methods/read/config.py says what each key does)
  c.read = dict(
      w_con=1.0,  # L = L_con + 0.1·L_rec + 0.5·L_align
      w_rec=0.1,
      w_align=0.5,
      align_direction="para_to_orig",
      t5_dropout=True,
      target_may_equal_positive=True,
      overlapping_swaps=False,
      proj_init="torch_linear",
      export_decoder=False,
      # the frozen decoder: an HF T5 v1.1 directory (t5.init), or a random one (:runlocal, the demo)
      t5=dict(init="", tokenizer="", random=False, random_layers=2, random_d_model=64, random_vocab=0))

  # Evaluation: none during training by default (python -m compclip_jax evaluate afterwards)
  c.evals.benchmarks = ()
  if arg.runlocal or arg.demo:
    c.read.t5.random = True  # a tiny random decoder
  return common.variant(c, arg)
