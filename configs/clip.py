"""Plain CLIP fine-tuning with the symmetric InfoNCE loss (the CLIP step of METHODS §1.4 on its own)."""
from compclip_jax.methods import clip
from compclip_jax.train import config


def get_config(arg: str = ""):
  return config.for_method(clip.METHOD, arg)
