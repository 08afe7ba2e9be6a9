"""`preprocess` vs transformers' CLIPImageProcessor (resize shortest edge, bicubic, centre crop, normalise)."""
import numpy as np
import pytest
import transformers
from PIL import Image

from compclip_jax.data.images import IMAGENET_MEAN, IMAGENET_STD, Preprocess


def _image(h, w, mode, seed=0):
  a = np.random.default_rng(seed).integers(0, 256, (h, w, 4), dtype=np.uint8)
  img = Image.fromarray(a, "RGBA")
  return img if mode == "RGBA" else img.convert(mode)


@pytest.mark.parametrize("h,w,mode", [(300, 451, "RGB"), (451, 300, "RGB"), (224, 224, "RGB"), (97, 130, "RGB"),
                                      (640, 481, "L"), (200, 300, "CMYK"), (333, 222, "P")])
@pytest.mark.parametrize("size,mean,std", [(224, None, None), (64, IMAGENET_MEAN, IMAGENET_STD)])
def test_matches_clip_image_processor(h, w, mode, size, mean, std):
  img = _image(h, w, mode)
  ours = Preprocess(size) if mean is None else Preprocess(size, mean, std)
  kw = {} if mean is None else {"image_mean": list(mean), "image_std": list(std)}
  ref = transformers.CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size}, **kw)
  want = ref(images=img, return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)
  got = ours(img)
  assert got.shape == (size, size, 3) and got.dtype == np.float32
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_alpha_is_dropped_not_composited():
  rgba = _image(50, 60, "RGBA")
  np.testing.assert_array_equal(Preprocess(32)(rgba), Preprocess(32)(rgba.convert("RGB")))


def test_16_bit_greyscale_is_scaled():
  a = (np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16)
  img = Image.fromarray(a)
  assert img.mode.startswith("I")
  out = Preprocess(32).resize_crop(img)
  assert out.dtype == np.uint8 and out.max() > 200 and out.min() < 10  # not clipped to white
