"""READ (METHODS §2): hard-negative contrastive + token reconstruction through a frozen T5 v1.1 decoder + paraphrase
alignment. All of CLIP and the projection W train; the decoder is frozen.

  python -m compclip_jax.main --config=configs/read.py --workdir=DIR --config.model.init=PATH \\
      --config.t5.init=T5_V1_1_LARGE_DIR --config.data.source=coco --config.data.path=dataset_coco.json \\
      --config.data.image_root=COCO
"""
from configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.method = "read"
  c.data.source = "coco"
  # METHODS §2.2: the reference trains on Karpathy `train` only (~83k images), not train + restval (~113k)
  c.data.splits = ("train",)
  # The reference tokenises with transformers' CLIPTokenizerFast (via CLIPProcessor): NFC, whitespace, lower-case,
  # no ftfy / html cleaning — our `data.clean_text=False` path (CLIC's open_clip tokenizer cleans: True there).
  c.data.clean_text = False
  c.batch_size = 256
  c.num_epochs = 5.0
  c.clip_every = 0
  c.optim.schedule, c.optim.lr, c.optim.warmup_steps = "read", 1e-5, 50
  c.optim.b1, c.optim.b2, c.optim.eps, c.optim.weight_decay, c.optim.grad_clip = 0.9, 0.999, 1e-8, 0.1, 1.0
  c.optim.trainable = (r"clip\..*", r"proj\.kernel")
  c.optim.frozen = (r"decoder\..*",)
  # everything decays except biases and LayerNorm weights (embeddings, logit_scale, W included) — METHODS §2.4
  c.optim.decay = (r".*\.(kernel|embedding)", r"clip\.logit_scale", r".*class_embedding")
  c.optim.no_decay = (r".*\.(bias|scale)",)
  c.model.remat_text = False
  return common.with_arg(c, arg, "read")
