"""Kept for one release: load_clip, save_clip, load_t5_decoder live in compclip_jax/weights/loading.py."""
from compclip_jax.weights.loading import *  # noqa: F401,F403
