"""Weights in and out: HF, open_clip and compclip formats; round trips, wrappers, mismatch diffs, pickle safety."""
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import safetensors.torch
import torch
import transformers

from compclip_jax import load_clip, save_clip
from compclip_jax.models.clip import DTypes
from compclip_jax.weights.maps import CheckpointMismatchError
from compclip_jax.weights.params import flat_params
from tests import hf_fixtures as fx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def hf_model():
  return fx.random_hf_clip(fx.hf_clip_config("quick_gelu"), seed=3)


@pytest.fixture()
def hf_dir(tmp_path, hf_model):
  d = tmp_path / "hf"
  hf_model.save_pretrained(d)
  return d


@pytest.fixture(scope="module")
def batch():
  ids = fx.varied_ids(5, 77, 49408, 49407, 0, seed=4)
  px = np.random.default_rng(5).standard_normal((3, 32, 32, 3)).astype(np.float32)
  return ids, px


def _embed(model, batch):
  ids, px = batch
  return np.asarray(model.encode_text(ids)), np.asarray(model.encode_image(px))


def _hf_to_open_clip(sd, n_text, n_vision):
  """An independent HF → open_clip conversion (the test's second implementation of METHODS §4's name facts)."""
  sd = {k: v.detach().clone() for k, v in sd.items()}
  oc = {"token_embedding.weight": sd["text_model.embeddings.token_embedding.weight"],
        "positional_embedding": sd["text_model.embeddings.position_embedding.weight"],
        "ln_final.weight": sd["text_model.final_layer_norm.weight"],
        "ln_final.bias": sd["text_model.final_layer_norm.bias"],
        "text_projection": sd["text_projection.weight"].T.contiguous(), "logit_scale": sd["logit_scale"],
        "visual.class_embedding": sd["vision_model.embeddings.class_embedding"],
        "visual.conv1.weight": sd["vision_model.embeddings.patch_embedding.weight"],
        "visual.positional_embedding": sd["vision_model.embeddings.position_embedding.weight"],
        "visual.ln_pre.weight": sd["vision_model.pre_layrnorm.weight"],
        "visual.ln_pre.bias": sd["vision_model.pre_layrnorm.bias"],
        "visual.ln_post.weight": sd["vision_model.post_layernorm.weight"],
        "visual.ln_post.bias": sd["vision_model.post_layernorm.bias"],
        "visual.proj": sd["visual_projection.weight"].T.contiguous()}
  for hf_tower, oc_tower, n in (("text_model", "", n_text), ("vision_model", "visual.", n_vision)):
    for i in range(n):
      h, o = f"{hf_tower}.encoder.layers.{i}.", f"{oc_tower}transformer.resblocks.{i}."
      for w in ("weight", "bias"):
        oc[o + f"attn.in_proj_{w}"] = torch.cat([sd[h + f"self_attn.{p}_proj.{w}"] for p in "qkv"], 0)
        oc[o + f"attn.out_proj.{w}"] = sd[h + f"self_attn.out_proj.{w}"]
        oc[o + f"ln_1.{w}"] = sd[h + f"layer_norm1.{w}"]
        oc[o + f"ln_2.{w}"] = sd[h + f"layer_norm2.{w}"]
        oc[o + f"mlp.c_fc.{w}"] = sd[h + f"mlp.fc1.{w}"]
        oc[o + f"mlp.c_proj.{w}"] = sd[h + f"mlp.fc2.{w}"]
  return oc


TINY_OPEN_CLIP_CFG = {"embed_dim": 32, "quick_gelu": True,
                      "vision_cfg": {"image_size": 32, "layers": 2, "width": 48, "patch_size": 8, "head_width": 16,
                                     "mlp_ratio": 2.0},
                      "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 4, "layers": 2,
                                   "mlp_ratio": 2.0}}


@pytest.fixture()
def open_clip_file(tmp_path, hf_model):
  d = tmp_path / "oc"
  d.mkdir()
  oc = _hf_to_open_clip(hf_model.state_dict(), 2, 2)
  safetensors.torch.save_file(oc, d / "open_clip_model.safetensors")
  (d / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_OPEN_CLIP_CFG}))
  return d / "open_clip_model.safetensors", oc


def test_hf_roundtrip_is_exact(hf_dir, tmp_path):
  model, tok, pre = load_clip(str(hf_dir))
  save_clip(model, str(tmp_path / "out"), format="hf", tokenizer=tok, preprocess=pre)
  a = safetensors.torch.load_file(hf_dir / "model.safetensors")
  b = safetensors.torch.load_file(tmp_path / "out" / "model.safetensors")
  a.pop("text_model.embeddings.position_ids", None)
  a.pop("vision_model.embeddings.position_ids", None)
  assert sorted(a) == sorted(b)
  for k in a:
    assert torch.equal(a[k], b[k]), k


def test_open_clip_import_matches_hf_and_roundtrips(open_clip_file, hf_model, batch, tmp_path):
  path, oc = open_clip_file
  model, tok, _ = load_clip(str(path))
  assert tok.pad_id == 0  # open_clip pads with 0
  txt, img = _embed(model, batch)
  np.testing.assert_allclose(txt, fx.hf_text(hf_model, batch[0]), atol=1e-4, rtol=0)
  np.testing.assert_allclose(img, fx.hf_image(hf_model, batch[1]), atol=1e-4, rtol=0)
  out = tmp_path / "again.safetensors"
  save_clip(model, str(out), format="open_clip")
  back = safetensors.torch.load_file(out)
  assert sorted(back) == sorted(oc)
  for k in oc:
    assert torch.equal(back[k], oc[k]), k


def test_hf_to_open_clip_to_ours_gives_identical_embeddings(hf_dir, batch, tmp_path):
  model, _, _ = load_clip(str(hf_dir))
  save_clip(model, str(tmp_path / "oc"), format="open_clip")
  again, _, _ = load_clip(str(tmp_path / "oc"))
  for x, y in zip(_embed(model, batch), _embed(again, batch)):
    np.testing.assert_array_equal(x, y)


def test_exported_hf_dir_loads_in_transformers(open_clip_file, batch, tmp_path):
  model, _, pre = load_clip(str(open_clip_file[0]))
  save_clip(model, str(tmp_path / "hf"), format="hf", preprocess=pre)
  ref = transformers.CLIPModel.from_pretrained(tmp_path / "hf").eval()
  txt, img = _embed(model, batch)
  np.testing.assert_allclose(fx.hf_text(ref, batch[0]), txt, atol=1e-4, rtol=0)
  np.testing.assert_allclose(fx.hf_image(ref, batch[1]), img, atol=1e-4, rtol=0)
  proc = json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())
  assert proc["crop_size"] == {"height": 32, "width": 32}


def test_compclip_format_keeps_dtypes(hf_dir, batch, tmp_path):
  model, _, _ = load_clip(str(hf_dir), vision_dtypes=DTypes(param="bfloat16"))
  save_clip(model, str(tmp_path / "cc"), format="compclip")
  again, _, _ = load_clip(str(tmp_path / "cc"), vision_dtypes=DTypes(param="bfloat16"))
  a, b = flat_params(model), flat_params(again)
  assert str(a["vision_model.pre_layrnorm.scale"].dtype) == "bfloat16"
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("suffix,wrap", [(".bin", "state_dict+module."), (".pt", "module.model."),
                                         (".pth", "none")])
def test_torch_pickles_with_wrappers(open_clip_file, batch, tmp_path, suffix, wrap):
  path, oc = open_clip_file
  ref, _, _ = load_clip(str(path))
  if wrap == "state_dict+module.":
    obj = {"state_dict": {f"module.{k}": v for k, v in oc.items()}, "epoch": 1}
  elif wrap == "module.model.":
    obj = {f"module.model.{k}": v for k, v in oc.items()}
  else:
    obj = oc
  f = path.parent / f"ckpt{suffix}"
  torch.save(obj, f)
  model, _, _ = load_clip(str(f))
  for x, y in zip(_embed(ref, batch), _embed(model, batch)):
    np.testing.assert_array_equal(x, y)


def test_sharded_and_pickled_hf_dirs(hf_model, hf_dir, batch, tmp_path):
  ref, _, _ = load_clip(str(hf_dir))
  sharded = tmp_path / "sharded"
  hf_model.save_pretrained(sharded, max_shard_size="2MB")
  assert (sharded / "model.safetensors.index.json").exists()
  pickled = tmp_path / "pickled"
  pickled.mkdir()
  (pickled / "config.json").write_text((hf_dir / "config.json").read_text())
  torch.save(hf_model.state_dict(), pickled / "pytorch_model.bin")
  for d in (sharded, pickled):
    model, _, _ = load_clip(str(d))
    for x, y in zip(_embed(ref, batch), _embed(model, batch)):
      np.testing.assert_array_equal(x, y)


def test_mismatching_checkpoint_gives_a_readable_diff(open_clip_file, tmp_path):
  _, oc = open_clip_file
  bad = dict(oc)
  del bad["transformer.resblocks.1.ln_2.weight"]
  bad["transformer.resblocks.7.extra.weight"] = torch.zeros(3)
  bad["visual.proj"] = torch.zeros(48, 16)
  d = tmp_path / "bad"
  d.mkdir()
  safetensors.torch.save_file(bad, d / "open_clip_model.safetensors")
  (d / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_OPEN_CLIP_CFG}))
  with pytest.raises(CheckpointMismatchError) as e:
    load_clip(str(d))
  msg = str(e.value)
  assert "missing keys (1):\n    transformer.resblocks.1.ln_2.weight" in msg
  assert "unexpected keys (1):\n    transformer.resblocks.7.extra.weight" in msg
  assert "visual.proj: checkpoint (48, 16), model expects (48, 32)" in msg


def test_hf_config_that_does_not_fit_the_weights(hf_dir):
  cfg = json.loads((hf_dir / "config.json").read_text())
  cfg["text_config"]["num_hidden_layers"] = 3
  cfg["projection_dim"] = 16
  (hf_dir / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(CheckpointMismatchError, match=r"(?s)missing keys \(16\).*text_projection\.weight: checkpoint"):
    load_clip(str(hf_dir))


class _Evil:
  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_a_malicious_pickle_is_never_executed(tmp_path, writer):
  marker = tmp_path / "pwned"
  f = tmp_path / "evil.pt"
  if writer == "torch.save":
    torch.save({"state_dict": _Evil(marker)}, f)
  else:
    with open(f, "wb") as fh:
      pickle.dump({"state_dict": _Evil(marker)}, fh, protocol=2)
  with pytest.raises(Exception, match="(?i)weights_only|unpickl|unsupported"):
    load_clip(str(f))
  assert not marker.exists()


def test_missing_path_says_it_never_downloads(tmp_path):
  with pytest.raises(FileNotFoundError, match="never downloads"):
    load_clip(str(tmp_path / "openai/clip-vit-base-patch32"))


def test_convert_cli(hf_dir, tmp_path):
  env = {**os.environ, "PYTHONPATH": ROOT}
  run = lambda *a: subprocess.run([sys.executable, "-m", "compclip_jax.convert", *a], capture_output=True, text=True,
                                  env=env, cwd=ROOT, check=True).stdout
  out = run(f"--src={hf_dir}", f"--dst={tmp_path / 'oc' / 'm.safetensors'}", "--to=open_clip")
  assert "[1/2] reading" in out and "[2/2] writing open_clip" in out and "wrote 2 files" in out
  assert "m.safetensors" in out and "open_clip_config.json" in out
  run(f"--src={tmp_path / 'oc' / 'm.safetensors'}", f"--dst={tmp_path / 'back'}", "--to=hf")
  a = safetensors.torch.load_file(hf_dir / "model.safetensors")
  b = safetensors.torch.load_file(tmp_path / "back" / "model.safetensors")
  for k in b:
    assert torch.equal(a[k], b[k]), k
  help_text = subprocess.run([sys.executable, "-m", "compclip_jax.convert", "--help"], capture_output=True, text=True,
                             env=env, cwd=ROOT).stdout
  assert "--to" in help_text


def test_an_hf_weights_file_alone_says_to_pass_its_directory(hf_dir):
  with pytest.raises(ValueError, match="pass the directory"):
    load_clip(str(hf_dir / "model.safetensors"))
