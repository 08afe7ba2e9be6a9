r"""NegCLIP as the CLIC reference runs it (METHODS §1.5 "our NegCLIP"): a single image, its first caption and that
caption's single-sentence swap negative; CE over positives ∪ negatives for i2t, over positives for t2i; no
alternation. The text side trains, on CLIC's optimiser and schedule.

  python -m compclip_jax.main --config=configs/negclip.py --workdir=DIR --config.model.init=CHECKPOINT \
      --config.data.path=dataset_coco.json --config.data.image_root=COCO

Arguments (`--config=configs/negclip.py:ARG`, comma-separated): runlocal, demo, model=B/32|B/16|L/14,
family=siglip (as configs/clic.py).
"""
from compclip_jax.train import config as common


def get_config(arg: str = ""):
  arg = common.parse_arg(arg, "negclip", runlocal=False, demo=False, model="", family="")
  c = common.base("negclip")

  # Precision: bf16 mixed precision as CLIC's (docs/training.md); frozen tower stored bf16; the text tower
  # rematerialised
  c.model.compute_dtype = "bfloat16"
  c.model.frozen_dtype = "bfloat16"
  c.model.attention = "auto"  # the fused Pallas kernel on a TPU (scores stay on chip), cuDNN on a GPU, XLA elsewhere
  c.model.pad_tokens_to = 16  # 77 tokens run as 80: exact, and no layout copy per projection on a TPU (docs/tpu.md)
  c.model.remat_text = True

  # Data: COCO-style captions (several per image), Karpathy train + restval
  c.data.source = "coco"
  c.data.splits = ("train", "restval")
  c.data.clean_text = True

  # Batch, steps, schedule and optimiser: CLIC's (METHODS §1.4)
  c.batch_size = 800
  c.num_epochs = 1.0
  c.total_steps = 0
  c.drop_last = True  # each epoch's last partial batch left out, as CLIC's reference DataLoader(drop_last=True)
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
      trainable=common.CLIP_TEXT,
      frozen=common.CLIP_VISION,
      decay=common.DECAY_2D,
      no_decay=common.NO_DECAY_2D)

  # NegCLIP: the first caption (True: a random one)
  c.negclip = dict(random_caption=False)

  c.evals.benchmarks = ()
  return common.variant(c, arg)
