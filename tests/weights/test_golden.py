"""METHODS §4 golden check on the real openai/clip-vit-base-patch32 weights (only where a local copy exists)."""
import os

import numpy as np
import pytest
from PIL import Image

from compclip_jax import load_clip

MODEL_DIR = os.environ.get("COMPCLIP_HF_CLIP_B32")
IMAGE = os.environ.get("COMPCLIP_GOLDEN_IMAGE")  # COCO val2014 image 39769 (COCO_val2014_000000039769.jpg)


@pytest.mark.slow
@pytest.mark.skipif(
    not (MODEL_DIR and IMAGE), reason="set COMPCLIP_HF_CLIP_B32 to a local openai/clip-vit-base-patch32"
    " "
    "directory and COMPCLIP_GOLDEN_IMAGE to COCO val2014 image 39769 to run the golden check")
def test_openai_b32_golden_logits():
  model, tokenizer, preprocess = load_clip(MODEL_DIR)
  logits, _ = model(tokenizer(["a photo of a cat", "a photo of a dog"]), preprocess(Image.open(IMAGE))[None])
  np.testing.assert_allclose(np.asarray(logits), [[24.5701, 19.3049]], atol=2e-3)
