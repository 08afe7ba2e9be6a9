"""CLIC (METHODS §1): text side fine-tuned with CLIC steps alternating with plain CLIP steps; vision tower frozen.
Section `clic` (compclip_jax/methods/clic/config.py); the reference recipe is `clic.config.recipe`.

  python -m compclip_jax.main --config=configs/clic.py --workdir=DIR --config.model.init=PATH \\
      --config.data.source=csv --config.data.path=rows.csv --config.data.image_root=IMAGES
  python -m compclip_jax.main --config=configs/clic.py:runlocal --workdir=/tmp/clic   # tiny, generated data
"""
from compclip_jax.methods import clic
from compclip_jax.train import config


def get_config(arg: str = ""):
  return config.for_method(clic.METHOD, arg)
