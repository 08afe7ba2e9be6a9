"""compclip_jax: compositional fine-tuning of CLIP (CLIC, READ) in JAX/Flax. See README.md."""
# load_clip / save_clip are imported on first use (PEP 562), so that `import compclip_jax.models…` or the device
# benchmark does not pull in the loaders' dependencies (PIL, tokenizers): nothing heavy happens at import time.
__all__ = ["load_clip", "save_clip"]


def __getattr__(name: str):
  if name in __all__:
    from compclip_jax.weights import loading  # pylint: disable=import-outside-toplevel
    return getattr(loading, name)
  raise AttributeError(f"module 'compclip_jax' has no attribute {name!r}")
