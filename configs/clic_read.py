r"""CLIC + READ's objectives — ours (compclip_jax/methods/clic_read/): no public code combines them. CLIC's samples,
its alternation with CLIP steps and its loss (METHODS §1), plus READ's token reconstruction and paraphrase alignment
(METHODS §2.3) on CLIC's positives; READ's paper presents those two objectives as a plug-in for other methods.

- Reconstruction: READ's frozen T5 v1.1 decoder reads W·pooled(p1) and reconstructs p2 (the same two sentences in
  the other order: an alternative caption whose content is entirely in p1).
- Alignment: (p3, p4), two other captions of the same image pair, as READ's reference aligned two distinct captions.
- Weights: CLIC's and READ's as they are — untuned. CLIC's optimiser, schedule, batch and data.
- Trainable: CLIC's text side + W; frozen: the vision tower and the T5 decoder.

  python -m compclip_jax.main --config=configs/clic_read.py --workdir=DIR --config.model.init=CHECKPOINT \
      --config.read.t5.init=T5_V1_1_LARGE_DIR --config.data.path=rows.csv --config.data.image_root=IMAGES

Arguments (`--config=configs/clic_read.py:ARG`, comma-separated): runlocal, demo, model=B/32|B/16|L/14,
family=siglip (as configs/clic.py).
"""
from compclip_jax.train import config as common


def get_config(arg: str = ""):
  arg = common.parse_arg(arg, "clic_read", runlocal=False, demo=False, model="", family="")
  c = common.base("clic_read")

  # Precision: bf16 mixed precision as CLIC's (docs/training.md); frozen parts stored bf16; the text tower
  # rematerialised
  c.model.compute_dtype = "bfloat16"
  c.model.frozen_dtype = "bfloat16"
  c.model.attention = "auto"  # the fused Pallas kernel on a TPU (scores stay on chip), cuDNN on a GPU, XLA elsewhere
  c.model.pad_tokens_to = 16  # 77 tokens run as 80: exact, and no layout copy per projection on a TPU (docs/tpu.md)
  c.model.remat_text = True

  # Data, batch and steps: CLIC's (METHODS §1.1, §1.4)
  c.data.source = "csv"
  c.data.splits = ("train", "restval")
  c.data.clean_text = True
  c.batch_size = 800
  c.num_epochs = 1.0
  c.total_steps = 0
  c.drop_last = True  # each epoch's last partial batch left out, as CLIC's reference DataLoader(drop_last=True)

  # Schedule and optimiser: CLIC's; READ's model wraps CLIP (`clip.` prefix), W is `proj`, the decoder `decoder.`
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
      trainable=tuple(rf"clip\.{r}" for r in common.CLIP_TEXT) + (r"proj\.kernel",),
      frozen=tuple(rf"clip\.{r}" for r in common.CLIP_VISION) + (r"decoder\..*",),
      decay=common.DECAY_2D,
      no_decay=common.NO_DECAY_2D)

  # CLIC's section (configs/clic.py's values) and READ's (configs/read.py's; read.w_con unused)
  c.clic = dict(clip_every=1, w_cont=0.5, w_sneg=0.5, w_uni=1.0, concat=True, imagenet_normalization=True,
                shared_words_across_tags=False, exclude_nonword=True)
  c.read = dict(w_con=1.0, w_rec=0.1, w_align=0.5, align_direction="para_to_orig", t5_dropout=True,
                target_may_equal_positive=True, overlapping_swaps=False, proj_init="torch_linear", export_decoder=False,
                t5=dict(init="", tokenizer="", random=False, random_layers=2, random_d_model=64, random_vocab=0))

  c.evals.benchmarks = ()
  if arg.runlocal or arg.demo:
    c.read.t5.random = True  # a tiny random decoder
  return common.variant(c, arg)
