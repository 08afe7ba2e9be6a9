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
  # premultiplied_alpha=False (data.alpha_premultiplied_resize=False): alpha dropped before resizing; the default
  # (resize with alpha, as open_clip's eval transform) is tested in test_images_alpha.py
  rgba = _image(50, 60, "RGBA")
  np.testing.assert_array_equal(
      Preprocess(32).resize_crop(rgba, premultiplied_alpha=False),
      Preprocess(32).resize_crop(rgba.convert("RGB")))
  assert not np.array_equal(Preprocess(32).resize_crop(rgba), Preprocess(32).resize_crop(rgba.convert("RGB")))


def test_16_bit_greyscale_is_clipped_as_pil_converts_it():
  # both references convert with PIL (`convert("RGBA")` / `convert("RGB")`), which clips 16-bit values to 0..255
  a = (np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16)
  img = Image.fromarray(a)
  assert img.mode.startswith("I")
  out = Preprocess(64).resize_crop(img)
  want = np.repeat(np.minimum(a, 255).astype(np.uint8)[..., None], 3, axis=-1)  # 64 px: no resize, no crop
  np.testing.assert_array_equal(out, want)


def _photo(h, w, seed=0):
  """A real-size, photo-like image: smooth gradients plus texture (random noise alone hides resampling errors)."""
  rng = np.random.default_rng(seed)
  yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
  base = np.stack([np.sin(6 * xx + c) * np.cos(4 * yy - c) for c in (0.0, 1.0, 2.0)], -1) * 100 + 128
  return Image.fromarray(np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8), "RGB")


@pytest.mark.parametrize("h,w", [(480, 640), (1024, 683), (300, 300), (150, 200)])
@pytest.mark.parametrize("edge,crop,resample", [(256, 224, 3), (224, 224, 3), (320, 224, 2), (201, 224, 3)])
def test_resize_edge_and_crop_size_follow_clip_image_processor(tmp_path, h, w, edge, crop, resample):
  """size.shortest_edge ≠ crop_size (e.g. 256 → 224), another resample, and an edge below the crop (zero padding),
  read from a preprocessor_config.json written by transformers itself; the export writes back what was read."""
  import json
  ref = transformers.CLIPImageProcessor(size={"shortest_edge": edge}, crop_size={"height": crop, "width": crop},
                                        resample=resample)
  ref.save_pretrained(tmp_path)
  ours = Preprocess.from_hf_dir(str(tmp_path), crop)
  assert (ours.size, ours.resize or ours.size, ours.resample) == (crop, edge, resample)
  img = _photo(h, w, seed=h + w)
  want = ref(images=img, return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)
  got = ours(img)
  assert got.shape == (crop, crop, 3)
  np.testing.assert_array_equal(got, want)  # bit-identical (resize = crop, as before this fix: max |Δ| 3.8)
  written = json.loads((tmp_path / "preprocessor_config.json").read_text())
  assert ours.to_hf_dict() == written


def test_a_preprocessor_config_we_cannot_follow_is_refused(tmp_path):
  import json
  for d, match in (({"crop_size": {"height": 224,
                                   "width": 200}}, "not square"), ({"size": {"height": 224,
                                                                             "width": 200}}, "equal height and width"),
                   ({"size": {"shortest_edge": 224},
                     "do_center_crop": False}, "do_center_crop"), ({"size": {"height": 256,
                                                                             "width": 256}}, "resize size 256 differs"),
                   ({"crop_size": 336}, "crop size 336 differs from the model's image_size 224")):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=match):
      Preprocess.from_hf_dir(str(tmp_path), 224)
