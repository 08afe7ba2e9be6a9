"""Plain CLIP fine-tuning with the symmetric InfoNCE loss (the CLIP step of METHODS §1.4 on its own)."""
from configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.method = "clip"
  c.data.source = "coco"
  c.clip_every = 0
  return common.with_arg(c, arg, "clip")
