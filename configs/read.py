"""READ (METHODS §2): hard-negative contrastive + token reconstruction through a frozen T5 v1.1 decoder + paraphrase
alignment. All of CLIP and the projection W train; the decoder is frozen. Section `read`
(compclip_jax/methods/read/config.py); the reference recipe is `read.config.recipe`.

  python -m compclip_jax.main --config=configs/read.py --workdir=DIR --config.model.init=PATH \\
      --config.read.t5.init=T5_V1_1_LARGE_DIR --config.data.source=coco --config.data.path=dataset_coco.json \\
      --config.data.image_root=COCO
"""
from compclip_jax.methods import read
from compclip_jax.train import config


def get_config(arg: str = ""):
  return config.for_method(read.METHOD, arg)
