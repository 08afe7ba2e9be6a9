"""Images with transparency and unusual PIL modes (METHODS §1.2 step 3, §1.4): resized as the CLIC reference does.

The reference (AmitPeleg/CLIC `data_loading.py`) opens every image with `.convert('RGBA')`, resizes it with
torchvision's `Resize` (= PIL's `resize`, bicubic, which premultiplies alpha) and keeps channels [:3]; its CLIP step
passes the same RGBA image to open_clip's eval transform, whose `convert('RGB')` comes after Resize/CenterCrop.
`_reference` below is that recipe, written out with PIL directly.
"""
import io

import numpy as np
import pytest
from PIL import Image

from compclip_jax.train import trainer
from compclip_jax.data import samples
from compclip_jax.data.images import Preprocess, load_image, squash, to_rgb_or_rgba
from compclip_jax.methods.clic import samples as clic_samples
from compclip_jax.methods.read import samples as read_samples
from compclip_jax.methods import clip as clip_method


def _reference(img: Image.Image, width: int, height: int) -> np.ndarray:
  """The CLIC reference's half image: RGBA, bicubic resize, alpha channel dropped."""
  return np.asarray(img.convert("RGBA").resize((width, height), Image.Resampling.BICUBIC))[..., :3]


def _png(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
  b = io.BytesIO()
  img.save(b, fmt, **kw)
  return b.getvalue()


def _half_transparent(h: int = 180, w: int = 300, seed: int = 0) -> Image.Image:
  """Random colours everywhere; the left half fully transparent (its colours must not show), the right opaque."""
  rgba = np.random.default_rng(seed).integers(0, 256, (h, w, 4), dtype=np.uint8)
  rgba[:, :w // 2, 3] = 0
  rgba[:, w // 2:, 3] = 255
  return Image.fromarray(rgba, "RGBA")


def _rec(img: Image.Image, fmt: str = "PNG", **kw) -> dict:
  return {"id": "x", "sentences": ["a cat", "b"], "image": load_image(_png(img, fmt, **kw), "x")}


def test_transparent_half_is_black_after_the_resize_as_in_the_reference():
  img = _half_transparent()
  rec = _rec(img)
  assert rec["image"].mode == "RGBA"  # load_image keeps alpha for the resize
  half = samples.half_image(rec, 224)  # wide → 224 × 112
  assert half.shape == (112, 224, 3) and half.dtype == np.uint8
  np.testing.assert_array_equal(half, _reference(img, 224, 112))
  assert (half[:, :100] == 0).all()  # fully transparent → black (PIL premultiplies), by hand
  assert half[:, 124:].mean() > 60  # the opaque half keeps its colours
  # data.alpha_premultiplied_resize=False: alpha dropped first, the colours under the transparent half show
  old = samples.half_image(rec, 224, premultiplied_alpha=False)
  np.testing.assert_array_equal(old, squash(img.convert("RGB"), 224, 112))
  differ = (old != half).any(-1).mean()
  assert differ > 0.45, differ  # METHODS §1.2 step 3: about half the pixels differ


def test_partially_transparent_pixels_keep_their_colour():
  # PIL un-premultiplies after the resize: a uniform 50 %-alpha image keeps its colour (no compositing on black)
  img = Image.new("RGBA", (64, 40), (200, 100, 50, 128))
  out = squash(load_image(_png(img), "x"), 32, 20)
  np.testing.assert_array_equal(out, _reference(img, 32, 20))
  assert np.abs(out.astype(int) - [200, 100, 50]).max() <= 2


def _modes():
  rng = np.random.default_rng(1)
  rgb = Image.fromarray(rng.integers(0, 256, (90, 150, 3), dtype=np.uint8), "RGB")
  grey = Image.fromarray(rng.integers(0, 256, (90, 150), dtype=np.uint8), "L")
  pal = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
  la = np.stack([np.asarray(grey), np.where(np.arange(150) < 50, 0, 255).astype(np.uint8)[None].repeat(90, 0)], -1)
  rgba_opaque = rgb.convert("RGBA")
  a16 = (rng.integers(0, 1200, (90, 150))).astype(np.uint16)
  return {  # name: (image, save kwargs, format, whether load_image must keep alpha)
      "rgb": (rgb, {}, "PNG", False),
      "rgb_jpeg": (rgb, {"quality": 90}, "JPEG", False),
      "rgb_trns": (rgb.quantize(8).convert("RGB"), {"transparency": tuple(rgb.quantize(8).convert("RGB")
                                                                           .getpixel((0, 0)))}, "PNG", True),
      "grey": (grey, {}, "PNG", False),
      "grey_trns": (grey, {"transparency": int(np.asarray(grey)[0, 0])}, "PNG", True),
      "la": (Image.fromarray(la, "LA"), {}, "PNG", True),
      "palette": (pal, {}, "PNG", False),
      "palette_trns": (pal, {"transparency": int(np.asarray(pal)[0, 0])}, "PNG", True),
      "gif_trns": (pal, {"transparency": int(np.asarray(pal)[0, 0])}, "GIF", True),
      "cmyk_jpeg": (rgb.convert("CMYK"), {"quality": 90}, "JPEG", False),
      "rgba_opaque": (rgba_opaque, {}, "PNG", False),  # opaque: resized as RGB, bit-identical (tested below)
      "grey_16bit": (Image.fromarray(a16), {}, "PNG", False),
  }


@pytest.mark.parametrize("name", list(_modes()))
def test_every_mode_is_converted_as_the_reference_converts_it(name):
  img, kw, fmt, alpha = _modes()[name]
  data = _png(img, fmt, **kw)
  rec = {"id": name, "sentences": ["a", "b"], "image": load_image(data, name)}
  assert rec["image"].mode == ("RGBA" if alpha else "RGB"), rec["image"].mode
  ref_img = Image.open(io.BytesIO(data))  # what the reference opens
  np.testing.assert_array_equal(samples.half_image(rec, 64), _reference(ref_img, 64, 32))
  # the CLIP step: open_clip's eval transform on the same RGBA image; 90×150 → shorter side 64, centre crop 64
  got = Preprocess(64).resize_crop(rec["image"])
  w = int(64 * 150 / 90)
  left = (w - 64) // 2
  want = np.asarray(
      ref_img.convert("RGBA").resize((w, 64), Image.Resampling.BICUBIC).crop((left, 0, left + 64, 64)).convert("RGB"))
  np.testing.assert_array_equal(got, want)
  if name == "grey_16bit":
    assert ref_img.mode.startswith("I") and (np.asarray(ref_img) > 255).any()  # clipped, as PIL converts it


def test_an_opaque_rgba_image_resizes_exactly_as_rgb():
  # to_rgb_or_rgba returns opaque images as RGB (faster); the reference resizes them as RGBA: same pixels
  rng = np.random.default_rng(2)
  for t in range(12):
    h, w = (int(x) for x in rng.integers(9, 260, 2))
    a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    if t % 3 == 0:
      a[:] = (np.linspace(0, 255, w)[None, :, None]).astype(np.uint8)
    rgba = Image.fromarray(np.concatenate([a, np.full((h, w, 1), 255, np.uint8)], -1), "RGBA")
    assert to_rgb_or_rgba(rgba).mode == "RGB"
    for size in [(112, 224), (224, 112), (31, 17), (w, h)]:
      np.testing.assert_array_equal(squash(to_rgb_or_rgba(rgba), *size), _reference(rgba, *size))


def test_switch_reaches_the_samples():
  img = _half_transparent(200, 200)
  rec = _rec(img)
  ref = clic_samples.Options(image_size=64)
  old = clic_samples.Options(image_size=64, alpha_premultiplied_resize=False)
  clip_ref, clip_old = clip_method.sample(rec, None, None, None,
                                          ref)["image"], clip_method.sample(rec, None, None, None, old)["image"]
  np.testing.assert_array_equal(clip_ref, _reference(img, 64, 64))  # square: resize only, no crop
  np.testing.assert_array_equal(clip_old, np.asarray(img.convert("RGB").resize((64, 64), Image.Resampling.BICUBIC)))
  assert (clip_ref[:, :28] == 0).all() and not (clip_old[:, :28] == 0).all()


def test_read_drops_alpha_first_as_its_reference():
  # READ's collator does img.convert("RGB") before the CLIPProcessor: alpha dropped before the resize
  from compclip_jax.data.negatives import Analysis
  img = _half_transparent(200, 200)
  analysis = [Analysis(("a",), ("DET",), (False,)).to_json()] * 2
  rec = {**_rec(img), "sentences": ["a cat on a mat", "a dog"], "analysis": analysis}
  s = read_samples.sample(rec, np.random.default_rng(0), None, read_samples.Options(image_size=64))
  np.testing.assert_array_equal(s["image"], np.asarray(img.convert("RGB").resize((64, 64), Image.Resampling.BICUBIC)))


def test_unconvertible_mode_is_a_bad_record_not_a_crash():
  from compclip_jax.data.records import BadRecord
  img = Image.new("RGB", (20, 20))
  with pytest.raises(BadRecord, match="corrupt_image|x:"):
    load_image(b"not an image", "x")
  assert load_image(_png(img), "x").mode == "RGB"


def test_prepare_counts_transparent_images_and_training_refuses_another_alpha_choice(tmp_path):
  """Prepared images are resized once, with prepare's --alpha_premultiplied_resize; a run whose step kinds resize
  otherwise is refused where that changes pixels (images with transparency), named with both ways out."""
  from compclip_jax import methods
  from compclip_jax.train import loop as train
  from compclip_jax.data.images import has_transparency
  from compclip_jax.data.sources import CsvSource, PreparedSource
  from compclip_jax.data.prepare import prepare
  from configs import clic, read
  root = tmp_path / "images"
  root.mkdir()
  _half_transparent(80, 60).save(root / "see_through.png")
  Image.new("RGBA", (60, 80), (10, 200, 30, 255)).save(root / "opaque_rgba.png")  # alpha channel, all opaque
  Image.new("RGB", (70, 70), (200, 10, 30)).save(root / "plain.jpg")
  rows = [f"{n},a red cat on a mat,a small dog\n" for n in ("see_through.png", "opaque_rgba.png", "plain.jpg")]
  (tmp_path / "rows.csv").write_text("".join(rows))
  assert [has_transparency(Image.open(root / n)) for n in ("see_through.png", "opaque_rgba.png", "plain.jpg")] == \
      [True, False, False]
  meta = prepare(CsvSource(str(tmp_path / "rows.csv"), str(root)), str(tmp_path / "prep"), image_size=32,
                 progress=False)
  assert meta["alpha_premultiplied_resize"] is True and meta["transparent_images"] == 1
  assert PreparedSource(str(tmp_path / "prep")).meta["transparent_images"] == 1
  c = clic.get_config("runlocal")
  c.data.path = str(tmp_path / "prep")
  clic_kinds, read_kinds = methods.get("clic").step_kinds(c), methods.get("read").step_kinds(read.get_config())
  trainer._check_prepared_alpha(c, meta, clic_kinds)  # pylint: disable=protected-access  # as prepared: fine
  c.data.alpha_premultiplied_resize = False
  with pytest.raises(
      train.ConfigError, match=r"(?s)prepared with --alpha_premultiplied_resize=True, but the clic "
      r"step resizes with False, and 1 of its images.*--alpha_premultiplied_resize=False.*or set "
      r"data.alpha_premultiplied_resize=True"):
    trainer._check_prepared_alpha(c, meta, clic_kinds)  # pylint: disable=protected-access
  c.data.alpha_premultiplied_resize = True
  with pytest.raises(train.ConfigError, match="the read step always drops alpha before resizing"):
    trainer._check_prepared_alpha(c, meta, read_kinds)  # pylint: disable=protected-access
  # without images with transparency the choice changes nothing: no refusal
  trainer._check_prepared_alpha(c, {**meta, "transparent_images": 0}, read_kinds)  # pylint: disable=protected-access
