"""compclip_jax: compositional fine-tuning of CLIP (CLIC, READ) in JAX/Flax. See README.md."""
from compclip_jax.loading import load_clip, save_clip

__all__ = ["load_clip", "save_clip"]
