"""open_clip / timm SigLIP state dicts in and out (weights/open_clip_siglip.py) against open_clip itself: the golden
fixture tests/fixtures/open_clip_siglip was written by open_clip 3.3.0 + timm 1.0.31 (tools/siglip_open_clip_fixture.py:
a tiny CustomTextCLIP with a timm SigLIP trunk, its state dict, open_clip_config.json and its own embeddings and
logits). Loading gives open_clip's outputs ≤ 1e-5; writing gives back its state dict bit for bit."""
import json
import os
import shutil

import numpy as np
import pytest

from compclip_jax.errors import UserError
from compclip_jax.weights import files, loading, open_clip_siglip
from tests import paths

FIXTURE = os.path.join(paths.FIXTURES, "open_clip_siglip")


def _load(path=FIXTURE, **kw):
  return loading.load_clip(os.path.join(path, "model.safetensors"), **kw)


def test_an_open_clip_siglip_loads_with_open_clips_own_outputs():
  model, _, pre = _load()
  e = np.load(os.path.join(FIXTURE, "expected.npz"))
  assert type(model).__name__ == "SigLIP" and pre.squash and pre.mean == (0.5, 0.5, 0.5)
  assert model.cfg.text.act == model.cfg.vision.act == "gelu"  # as open_clip / timm build ViT-B-16-SigLIP
  np.testing.assert_allclose(np.asarray(model.encode_text(e["ids"])), e["text"], atol=1e-5)
  np.testing.assert_allclose(np.asarray(model.encode_image(e["pixels_nhwc"])), e["image"], atol=1e-5)
  np.testing.assert_allclose(np.asarray(model(e["ids"], e["pixels_nhwc"])[1]), e["logits_per_text"], atol=1e-5)


def test_writing_gives_open_clips_state_dict_back_bit_for_bit(tmp_path):
  model, _, _ = _load()
  written = loading.save_clip(model, str(tmp_path), "open_clip")
  theirs = files.read_safetensors(os.path.join(FIXTURE, "model.safetensors"))
  ours = files.read_safetensors(written[0])
  assert sorted(ours) == sorted(theirs)
  for k, v in theirs.items():
    assert ours[k].shape == v.shape and np.array_equal(ours[k], v), k
  side = json.loads((tmp_path / "open_clip_config.json").read_text())
  fixture_cfg = json.loads(open(os.path.join(FIXTURE, "open_clip_config.json")).read())
  assert side["model_cfg"]["text_cfg"]["heads"] == fixture_cfg["model_cfg"]["text_cfg"]["heads"]
  assert side["timm_trunk_kwargs"]["num_heads"] == 4  # a size timm has no name for: its trunk's kwargs recorded
  again, _, _ = loading.load_clip(written[0])  # and it reads back as the same model
  assert again.cfg == model.cfg


def test_a_named_size_is_written_as_open_clips_own_config_and_an_activation_it_lacks_is_said(tmp_path):
  from flax import nnx
  from compclip_jax.models.siglip import config as sc
  from compclip_jax.models.siglip.model import SigLIP
  b16 = sc.SiglipConfig()  # HF's B/16 at 224 (tanh GELU): ViT-B-16-SigLIP's trunk, which timm builds with exact GELU
  cfg = open_clip_siglip.open_clip_config(b16)
  assert cfg["model_cfg"]["vision_cfg"]["timm_model_name"] == "vit_base_patch16_siglip_224"
  assert "timm_trunk_kwargs" not in cfg and cfg["model_cfg"]["text_cfg"]["act_kwargs"] == {"approximate": "tanh"}
  assert "timm vit_base_patch16_siglip_224) with gelu, this model computes gelu_pytorch_tanh" in \
      open_clip_siglip.activation_mismatch(b16)
  tiny = sc.tiny()  # a size timm has no name for: its kwargs keep the tanh GELU, and it reads back as it was
  assert open_clip_siglip.activation_mismatch(tiny) is None
  written = loading.save_clip(SigLIP(tiny, rngs=nnx.Rngs(0)), str(tmp_path), "open_clip")
  assert loading.load_clip(written[0])[0].cfg == tiny


def test_what_a_state_dict_does_not_say_must_come_from_somewhere(tmp_path):
  shutil.copyfile(os.path.join(FIXTURE, "model.safetensors"), tmp_path / "model.safetensors")
  with pytest.raises(UserError, match="records neither its heads nor its activations; pass model_name="):
    _load(str(tmp_path))
  with pytest.raises(UserError, match="not an open_clip SigLIP name"):
    _load(str(tmp_path), model_name="ViT-B-32")
  with pytest.raises(UserError, match="activations are read from its open_clip_config.json"):
    _load(FIXTURE, activation="gelu")
  (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": {"text_cfg": {"heads": 4}}}))
  with pytest.raises(UserError, match="not an open_clip SigLIP config"):
    _load(str(tmp_path))


def test_the_name_table_agrees_with_the_shapes_of_the_real_configs():
  """Every open_clip SigLIP name's trunk is a known timm trunk whose width its heads divide."""
  widths = {"base": 768, "large": 1024, "so400m": 1152, "giantopt": 1536}
  for name, (trunk, text_heads, act) in open_clip_siglip.OPEN_CLIP_NAMES.items():
    heads, _ = open_clip_siglip.TIMM_TRUNKS[trunk]
    assert widths[trunk.split("_")[1]] % heads == 0 and text_heads in (12, 16), name
    assert (act == "gelu_pytorch_tanh") == ("SigLIP2" in name), name
