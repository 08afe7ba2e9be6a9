"""CLIC (METHODS §1): text side fine-tuned with CLIC steps alternating with plain CLIP steps; vision tower frozen.

  python -m compclip_jax.main --config=configs/clic.py --workdir=DIR --config.model.init=PATH \\
      --config.data.source=csv --config.data.path=rows.csv --config.data.image_root=IMAGES
  python -m compclip_jax.main --config=configs/clic.py:runlocal --workdir=/tmp/clic   # tiny, generated data
"""
from configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.method = "clic"
  c.batch_size = 800  # 4 GPUs × 200
  c.num_epochs = 1.0
  c.optim.schedule, c.optim.lr, c.optim.start_lr, c.optim.end_lr, c.optim.warmup_frac = "clic", 1e-6, 1e-7, 1e-8, 0.2
  c.optim.b1, c.optim.b2, c.optim.eps, c.optim.weight_decay, c.optim.grad_clip = 0.9, 0.98, 1e-8, 0.1, 0.0
  c.optim.trainable, c.optim.frozen = common.CLIP_TEXT, common.CLIP_VISION
  return common.with_arg(c, arg, "clic")
