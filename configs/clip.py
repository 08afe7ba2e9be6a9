"""Plain CLIP fine-tuning with the symmetric InfoNCE loss (the CLIP step of METHODS §1.4 on its own)."""
from configs import common


def get_config(arg: str = ""):
  c = common.base()
  c.method = "clip"
  c.data.source = "coco"
  c.clip_every = 0
  if arg == "runlocal":
    common.runlocal(c)
    c.data.source = "coco"
  elif arg:
    raise ValueError(f"configs/clip.py: unknown argument {arg!r} (use '' or 'runlocal')")
  return c
