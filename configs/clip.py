"""Plain contrastive fine-tuning: the symmetric InfoNCE loss on a CLIP (the CLIP step of METHODS §1.4 on its own), and
on a SigLIP its own sigmoid loss (or InfoNCE with `siglip.contrastive="softmax"`; docs/siglip.md)."""
from compclip_jax.methods import clip
from compclip_jax.train import config


def get_config(arg: str = ""):
  return config.for_method(clip.METHOD, arg)
