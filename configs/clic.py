r"""CLIC (METHODS §1; arXiv 2505.24424): the text side fine-tuned with CLIC steps — two images concatenated, four
positive captions and a swapped hard negative — alternating with plain CLIP steps; the vision tower frozen.

  python -m compclip_jax.main --config=configs/clic.py --workdir=DIR --config.model.init=CHECKPOINT \
      --config.data.path=rows.csv --config.data.image_root=IMAGES

Arguments (`--config=configs/clic.py:ARG`, comma-separated):
  runlocal        a tiny random model on the generated world, a minute on a laptop CPU
  demo            the fine-tuning stage of the synthetic-world demo (python -m compclip_jax.demo)
  model=B/32      a random model of that architecture (B/32, B/16, L/14): the TPU compile check, the benchmarks
  family=siglip   with runlocal / demo: a tiny SigLIP instead of a tiny CLIP
"""
from compclip_jax.train import config as common


def get_config(arg: str = ""):
  arg = common.parse_arg(arg, "clic", runlocal=False, demo=False, model="", family="")
  c = common.base("clic")

  # Precision: bf16 mixed precision — matmuls and activations bf16; softmax, layer-norm statistics, logits and losses
  # fp32; trained parameters, gradients and AdamW state fp32 (the reference trains with fp16 autocast; bf16 needs no
  # loss scaling: docs/training.md); the frozen tower stored bf16; the text tower rematerialised (the same
  # function, +20 % of the text step's FLOPs: docs/tpu.md)
  c.model.compute_dtype = "bfloat16"
  c.model.frozen_dtype = "bfloat16"
  c.model.attention = "auto"  # the fused Pallas kernel on a TPU (scores stay on chip), cuDNN on a GPU, XLA elsewhere
  c.model.pad_tokens_to = 16  # 77 tokens run as 80: exact, and no layout copy per projection on a TPU (docs/tpu.md)
  c.model.remat_text = True

  # Data (METHODS §1.1): CSV rows of an image and its captions (CLIC's COCO / CC3M / CC12M / RedCaps files)
  c.data.source = "csv"
  c.data.splits = ("train", "restval")  # for data.source="coco": Karpathy train + restval
  c.data.clean_text = True  # open_clip's tokenizer cleans (ftfy, html)

  # Batch and steps (METHODS §1.4): global batch 800 (4 GPUs × 200), one epoch (~1M rows → ~1250 steps)
  c.batch_size = 800
  c.num_epochs = 1.0
  c.total_steps = 0  # 0: from num_epochs × records / batch_size
  c.drop_last = True  # each epoch's last partial batch left out, as CLIC's reference DataLoader(drop_last=True)

  # Schedule and optimiser (METHODS §1.4): linear warm-up 1e-7 → 1e-6 over 20 % of the steps, cosine to 1e-8;
  # AdamW β (0.9, 0.98), ε 1e-8, weight decay 0.1 on ≥2-D weights; no clipping; logit_scale unclamped
  c.optim = dict(
      schedule="warmup_frac_cosine",
      lr=1e-6,
      start_lr=1e-7,
      end_lr=1e-8,
      warmup_frac=0.2,
      warmup_steps=50,  # read by warmup_steps_cosine only (the :demo schedule)
      reference_warmup_cosine=True,  # as CLIC's cosine_scheduler(…, loader_len + 1): train/optim.py
      b1=0.9,
      b2=0.98,
      eps=1e-8,
      weight_decay=0.1,
      grad_clip=0.0,
      clamp_logit_scale=False,
      fp32_decay_factor=True,  # the decay as torch's AdamW rounds it: train/optim.py torch_decay_and_rate
      # what trains: the text side (embeddings, text tower, final LN, text projection, logit scale)
      trainable=common.CLIP_TEXT,
      frozen=common.CLIP_VISION,
      decay=common.DECAY_2D,
      no_decay=common.NO_DECAY_2D)

  # CLIC (METHODS §1.2–1.4; methods/clic/config.py says what each key does)
  c.clic = dict(
      clip_every=1,  # CLIC, CLIP, CLIC, CLIP, …
      w_cont=0.5,  # L = 0.5·L_cont + 0.5·L_S-Neg + 1.0·L_Uni
      w_sneg=0.5,
      w_uni=1.0,
      concat=True,
      imagenet_normalization=True,
      shared_words_across_tags=False,
      exclude_nonword=True)

  # Evaluation: none during training by default (python -m compclip_jax evaluate afterwards); e.g.
  # --config.evals.benchmarks='("sugarcrepe", "sugarcrepe_pp", "winoground")'
  c.evals.benchmarks = ()
  return common.variant(c, arg)
