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

from tests import paths
from compclip_jax import load_clip, save_clip
from compclip_jax.models.layers import DTypes
from compclip_jax.weights.maps import CheckpointMismatchError
from compclip_jax.weights.params import flat_params
from tests import hf_fixtures as fx

ROOT = paths.ROOT


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
  oc = {
      "token_embedding.weight": sd["text_model.embeddings.token_embedding.weight"],
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
      "visual.proj": sd["visual_projection.weight"].T.contiguous()
  }
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


TINY_OPEN_CLIP_CFG = {
    "embed_dim": 32, "quick_gelu": True,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 48, "patch_size": 8, "head_width": 16, "mlp_ratio": 2.0},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 4, "layers": 2, "mlp_ratio": 2.0}
}


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


def test_compclip_version_1_files_with_in_out_kernels_still_load(hf_dir, batch, tmp_path):
  """Files of the first compclip format ([in, out] dense kernels) load as the same model; an unknown version is
  refused, not guessed. The v1 file is made by hand from transformers' weights: weight.T under our names."""
  import safetensors.numpy
  model, _, _ = load_clip(str(hf_dir))
  save_clip(model, str(tmp_path / "v2"), format="compclip")
  sd = safetensors.numpy.load_file(hf_dir / "model.safetensors")
  flat = flat_params(model)
  assert json.loads((tmp_path / "v2" / "compclip.json").read_text())["version"] == 2
  v1 = {}
  for k, v in flat.items():  # our names; a dense kernel as torch's weight transposed, as version 1 stored it
    hf_key = k.rsplit(".", 1)[0] + ".weight"
    v1[k] = np.ascontiguousarray(sd[hf_key].T) if k.endswith(".kernel") and v.ndim == 2 else v
  assert not np.array_equal(v1["text_model.encoder.layers.0.self_attn.q_proj.kernel"],
                            flat["text_model.encoder.layers.0.self_attn.q_proj.kernel"])  # square: only the layout
  (tmp_path / "v1").mkdir()
  safetensors.numpy.save_file(v1, tmp_path / "v1" / "model.safetensors")
  meta = json.loads((tmp_path / "v2" / "compclip.json").read_text())
  (tmp_path / "v1" / "compclip.json").write_text(json.dumps({**meta, "version": 1}))
  again, _, _ = load_clip(str(tmp_path / "v1"))
  for k, v in flat_params(again).items():
    np.testing.assert_array_equal(v, flat[k], err_msg=k)
  np.testing.assert_array_equal(_embed(again, batch)[0], _embed(model, batch)[0])
  (tmp_path / "v1" / "compclip.json").write_text(json.dumps({**meta, "version": 3}))
  with pytest.raises(ValueError, match="compclip format version 3"):
    load_clip(str(tmp_path / "v1"))


@pytest.mark.parametrize("suffix,wrap", [(".bin", "state_dict+module."), (".pt", "module.model."), (".pth", "none")])
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
  run = lambda *a: subprocess.run([sys.executable, "-m", "compclip_jax", "convert", *a], capture_output=True, text=True,
                                  env=env, cwd=ROOT, check=True).stdout
  out = run(f"--src={hf_dir}", f"--dst={tmp_path / 'oc' / 'm.safetensors'}", "--to=open_clip")
  assert "[1/2] reading" in out and "[2/2] writing open_clip" in out and "wrote 2 files" in out
  assert "m.safetensors" in out and "open_clip_config.json" in out
  run(f"--src={tmp_path / 'oc' / 'm.safetensors'}", f"--dst={tmp_path / 'back'}", "--to=hf")
  a = safetensors.torch.load_file(hf_dir / "model.safetensors")
  b = safetensors.torch.load_file(tmp_path / "back" / "model.safetensors")
  for k in b:
    assert torch.equal(a[k], b[k]), k
  help_text = subprocess.run([sys.executable, "-m", "compclip_jax", "convert", "--help"], capture_output=True,
                             text=True, env=env, cwd=ROOT).stdout
  assert "--to" in help_text


def test_an_hf_weights_file_alone_says_to_pass_its_directory(hf_dir):
  with pytest.raises(ValueError, match="pass the directory"):
    load_clip(str(hf_dir / "model.safetensors"))


# ------------------------------------------------------------------ open_clip: never guess the architecture silently
def _bare_open_clip(tmp_path, oc):
  """The open_clip state dict alone: no open_clip_config.json, so heads and activation are not recorded."""
  d = tmp_path / "bare"
  d.mkdir()
  safetensors.torch.save_file(oc, d / "model.safetensors")
  return d / "model.safetensors"


def test_a_bare_open_clip_state_dict_asks_for_its_activation(open_clip_file, tmp_path):
  from compclip_jax.weights.open_clip import ArchitectureUnknownError
  with pytest.raises(ArchitectureUnknownError,
                     match=r"activation is not recorded.*activation='quick_gelu'.*model_name"):
    load_clip(str(_bare_open_clip(tmp_path, open_clip_file[1])))


def test_a_bare_state_dict_of_unknown_shapes_is_refused_not_guessed(open_clip_file, tmp_path):
  """Text width 64 with 4 heads (a ÷64 guess says 1) and vision width 48 (÷64 gave ZeroDivisionError)."""
  from compclip_jax.weights.open_clip import ArchitectureUnknownError
  with pytest.raises(
      ArchitectureUnknownError, match=r"(?s)attention heads is not recorded.*text.width 64.*"
      r"vision.width 48.*model_name=.*ViT-H-14.*open_clip_config.json"):
    load_clip(str(_bare_open_clip(tmp_path, open_clip_file[1])), activation="quick_gelu")


def test_a_shape_matched_builtin_gives_the_heads_and_says_so(open_clip_file, hf_model, batch, tmp_path, monkeypatch,
                                                             caplog):
  from compclip_jax.models import clip_config
  monkeypatch.setitem(clip_config.OPEN_CLIP_MODELS, "Tiny-Test",
                      {k: v for k, v in TINY_OPEN_CLIP_CFG.items() if k != "quick_gelu"})
  with caplog.at_level("WARNING"):
    model, _, _ = load_clip(str(_bare_open_clip(tmp_path, open_clip_file[1])), activation="quick_gelu")
  assert "matches the built-in Tiny-Test" in caplog.text and "(text 4, vision 3)" in caplog.text
  txt, img = _embed(model, batch)
  np.testing.assert_allclose(txt, fx.hf_text(hf_model, batch[0]), atol=1e-4, rtol=0)
  np.testing.assert_allclose(img, fx.hf_image(hf_model, batch[1]), atol=1e-4, rtol=0)


# open_clip's published model profile (docs/model_profile.csv): total / image / text parameters in millions.
OPEN_CLIP_PROFILE = {
    "ViT-B-32": (151.28, 87.85, 63.43), "ViT-H-14": (986.11, 632.08, 354.03), "ViT-g-14": (1366.68, 1012.65, 354.03),
    "ViT-bigG-14": (2539.57, 1844.91, 694.66)
}
# open_clip's model_configs: vision head_width, text heads
OPEN_CLIP_HEADS = {"ViT-B-32": (64, 8), "ViT-H-14": (80, 16), "ViT-g-14": (88, 16), "ViT-bigG-14": (104, 20)}


@pytest.mark.parametrize("name", sorted(OPEN_CLIP_PROFILE))
def test_big_open_clip_names_have_their_real_shapes(name):
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  from compclip_jax.models.layers import ShapeOnlyRngs
  from compclip_jax.weights import params
  cfg = clip_config.named(name)
  assert cfg.text.act == cfg.vision.act == "gelu" and clip_config.named(f"{name}-quickgelu").text.act == "quick_gelu"
  assert (cfg.vision.width // cfg.vision.heads, cfg.text.heads) == OPEN_CLIP_HEADS[name]
  shapes = params.shapes(CLIP(cfg, rngs=ShapeOnlyRngs()))
  count = lambda keep: round(sum(int(np.prod(s)) for k, s in shapes.items() if keep(k)) / 1e6, 2)
  image = lambda k: k.startswith(("vision_model.", "visual_projection."))
  assert (count(lambda k: True), count(image), count(lambda k: not image(k))) == OPEN_CLIP_PROFILE[name]


def test_open_clip_config_with_a_non_plain_tower_or_bad_head_width_is_refused(open_clip_file):
  path, _ = open_clip_file
  side = path.parent / "open_clip_config.json"
  for change, match in (({"vision_cfg": {"attentional_pool": True}}, "not a plain CLIP tower"),
                        ({"vision_cfg": {"head_width": 20}}, "head_width 20 does not divide width 48"),
                        ({"vision_cfg": {"head_width": 64}}, "head_width 64 does not divide width 48")):
    cfg = json.loads(json.dumps(TINY_OPEN_CLIP_CFG))
    cfg["vision_cfg"].update(change["vision_cfg"])
    side.write_text(json.dumps({"model_cfg": cfg}))
    with pytest.raises(ValueError, match=match):
      load_clip(str(path))


def test_open_clip_export_refuses_a_pooling_rule_open_clip_cannot_express(tmp_path):
  """open_clip pools at argmax(ids): the same as HF's 'first eos' only when eos is the largest id."""
  hf = fx.random_hf_clip(fx.hf_clip_config("quick_gelu", eos_token_id=5), seed=1)
  hf.save_pretrained(tmp_path / "eos5")
  model, _, _ = load_clip(str(tmp_path / "eos5"))
  with pytest.raises(ValueError, match=r"first eos_token_id 5, open_clip at argmax.*format='hf'"):
    save_clip(model, str(tmp_path / "oc5"), format="open_clip")
  assert not (tmp_path / "oc5").exists()
  # eos = the largest id: argmax finds the first eos, so the export is faithful and reloads to the same features
  ids = fx.varied_ids(4, 77, 49408, 49407, 0, seed=8)
  fx.random_hf_clip(fx.hf_clip_config("quick_gelu", eos_token_id=49407), seed=1).save_pretrained(tmp_path / "eos")
  model, _, _ = load_clip(str(tmp_path / "eos"))
  save_clip(model, str(tmp_path / "oc"), format="open_clip")
  again, _, _ = load_clip(str(tmp_path / "oc"))
  assert again.cfg.text.pools_at_argmax
  np.testing.assert_array_equal(np.asarray(model.encode_text(ids)), np.asarray(again.encode_text(ids)))


# ------------------------------------------------------------------------ HF export: tokenizer and processor files
BENCHMARKS = os.path.join(os.path.dirname(ROOT), "shared", "benchmarks")


def _sugarcrepe_captions() -> list[str]:
  import glob
  files_ = sorted(glob.glob(os.path.join(BENCHMARKS, "sugarcrepe", "*.json")))
  if not files_:
    pytest.skip(f"{BENCHMARKS}/sugarcrepe not found (the team's shared benchmark files)")
  caps = []
  for f in files_:
    caps += [r["caption"] for r in json.loads(open(f).read()).values()]
  return caps


def test_hf_export_with_the_builtin_tokenizer_loads_in_clip_processor(hf_dir, tmp_path):
  """CLIPProcessor.from_pretrained(export): same ids as ours on every SugarCrepe caption where HF's cleaning (NFC,
  whitespace, lower-case) and ours (also ftfy + html.unescape, as open_clip) see the same text; same pixels."""
  from compclip_jax.data.images import Preprocess
  from compclip_jax.data.tokenizers import clean_text, normalize_whitespace
  from tests.data.test_preprocess import _photo  # pylint: disable=import-outside-toplevel
  (hf_dir / "preprocessor_config.json").write_text(json.dumps(Preprocess(32, resize=40).to_hf_dict()))
  model, tok, pre = load_clip(str(hf_dir))
  assert tok.backend == "instant-clip-tokenizer" and pre.resize == 40
  written = save_clip(model, str(tmp_path / "out"), format="hf", tokenizer=tok, preprocess=pre)
  assert {os.path.basename(p) for p in written} >= {
      "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json", "preprocessor_config.json"
  }
  proc = transformers.CLIPProcessor.from_pretrained(tmp_path / "out")
  caps = sorted(set(_sugarcrepe_captions()))
  same = [c for c in caps if clean_text(c) == normalize_whitespace(c).lower()]
  assert len(same) > 0.99 * len(caps)
  theirs = proc(text=same, padding="max_length", max_length=77, truncation=True, return_tensors="np")["input_ids"]
  np.testing.assert_array_equal(tok(same), theirs)
  imgs = [_photo(480, 640, seed=1), _photo(700, 500, seed=2), _photo(33, 90, seed=3)]
  px = proc(images=imgs, return_tensors="np")["pixel_values"].transpose(0, 2, 3, 1)
  np.testing.assert_array_equal(np.stack([pre(im) for im in imgs]), px)
  again, tok2, pre2 = load_clip(str(tmp_path / "out"))  # the export reloads with its files: same ids, same transform
  assert tok2.backend == "transformers" and pre2 == pre
  np.testing.assert_array_equal(tok2(same[:200]), tok(same[:200]))


def test_convert_a_nonstandard_vocabulary_without_tokenizer_files_warns_and_converts(tmp_path, caplog):
  from compclip_jax.cli.convert import convert
  import io
  fx.random_hf_clip(fx.hf_clip_config("quick_gelu", vocab_size=1000), seed=2).save_pretrained(tmp_path / "v1000")
  out = io.StringIO()
  with caplog.at_level("WARNING"):
    written = convert(str(tmp_path / "v1000"), str(tmp_path / "out"), "hf", out=out)
  assert "vocab size 1000" in caplog.text and "tokenizer: none" in out.getvalue()
  assert {os.path.basename(p) for p in written} == {"config.json", "model.safetensors", "preprocessor_config.json"}
  a = safetensors.torch.load_file(tmp_path / "v1000" / "model.safetensors")
  b = safetensors.torch.load_file(tmp_path / "out" / "model.safetensors")
  for k in b:
    assert torch.equal(a[k], b[k]), k


# ------------------------------------------------------------------------------------ open_clip loads our export
OPEN_CLIP_SKIP = (
    "open_clip_torch is not installed. It cannot be installed here with its dependencies: it needs torchvision, and "
    "the PyPI wheel torchvision==0.28.0 (the one for torch 2.13.0) is a CUDA build whose _C.so links libtorch_cuda.so "
    "and libc10_cuda.so, absent from the CPU torch, so `import torchvision` fails ('operator torchvision::nms does "
    "not exist'; the +cpu wheel is only on PyTorch's own index, not reachable here) — and a broken torchvision would "
    "also break transformers' image processors. `pip install --no-deps open_clip_torch==3.3.0` enables this test: "
    "it runs open_clip in a subprocess with a torchvision stand-in (tests/open_clip_stub).")

OPEN_CLIP_VERSION = "open_clip_torch==3.3.0"


def _open_clip_site(tmp_path) -> str | None:
  """A directory to put on PYTHONPATH so that `import open_clip` works: "" when it is installed, else a
  `pip install --no-deps --target` of it (pure Python, seconds; the CI machine reaches PyPI); None if that fails."""
  import importlib.util
  if importlib.util.find_spec("open_clip") is not None:
    return ""
  target = tmp_path / "open_clip_site"
  proc = subprocess.run([
      sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
      str(target), OPEN_CLIP_VERSION
  ], capture_output=True, text=True, timeout=600)
  return str(target) if proc.returncode == 0 else None


def test_open_clip_itself_loads_our_export(hf_model, batch, tmp_path):
  """`open_clip.create_model('local-dir:…')` on our open_clip export gives transformers' features on the same
  weights (open_clip's own CLIP modules, fused attention and QuickGELU)."""
  site = _open_clip_site(tmp_path)
  if site is None:
    pytest.skip(OPEN_CLIP_SKIP + f" (pip install --no-deps --target … {OPEN_CLIP_VERSION} failed here)")
  model, _, pre = load_clip(str(_hf_dir_of(hf_model, tmp_path)))
  save_clip(model, str(tmp_path / "oc"), format="open_clip", preprocess=pre)
  ids, px = batch
  np.savez(tmp_path / "in.npz", ids=ids, px=px)
  stub = os.path.join(ROOT, "tests", "open_clip_stub")
  proc = subprocess.run([
      sys.executable,
      os.path.join(stub, "load_export.py"),
      str(tmp_path / "oc"),
      str(tmp_path / "in.npz"),
      str(tmp_path / "out.npz")
  ], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (stub, site) if p)},
                        cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = np.load(tmp_path / "out.npz")
  np.testing.assert_allclose(out["text"], fx.hf_text(hf_model, ids), atol=1e-4, rtol=0)
  np.testing.assert_allclose(out["image"], fx.hf_image(hf_model, px), atol=1e-4, rtol=0)


def _hf_dir_of(hf_model, tmp_path):
  d = tmp_path / "hf_for_open_clip"
  hf_model.save_pretrained(d)
  return d


def test_load_clip_builds_the_model_from_the_config_without_tracing(hf_dir, batch, monkeypatch):
  """Shapes come from the config (a shape-only build), not from tracing the model: eval_shape is never called."""
  import jax
  from flax import nnx
  ref, _, _ = load_clip(str(hf_dir))

  def refuse(*a, **k):
    raise AssertionError("load_clip traced the model")

  monkeypatch.setattr(nnx, "eval_shape", refuse)
  monkeypatch.setattr(jax, "eval_shape", refuse)
  model, _, _ = load_clip(str(hf_dir))
  for x, y in zip(_embed(ref, batch), _embed(model, batch)):
    np.testing.assert_array_equal(x, y)


def test_an_hf_config_without_eos_token_id_pools_as_transformers_does(tmp_path, batch):
  """A missing key takes transformers' default (eos 49407), not our legacy rule: same features as CLIPModel."""
  hf = fx.random_hf_clip(fx.hf_clip_config("quick_gelu", eos_token_id=999, vocab_size=1000), seed=5)
  hf.save_pretrained(tmp_path / "m")
  cfg = json.loads((tmp_path / "m" / "config.json").read_text())
  del cfg["text_config"]["eos_token_id"]
  (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
  ref = transformers.CLIPModel.from_pretrained(tmp_path / "m").eval()
  model, _, _ = load_clip(str(tmp_path / "m"))
  ids = fx.varied_ids(4, 77, 1000, 999, 0, seed=6)
  np.testing.assert_allclose(np.asarray(model.encode_text(ids)), fx.hf_text(ref, ids), atol=1e-4, rtol=0)


def test_repeated_loads_share_the_template_not_the_parameters(hf_dir, batch):
  """The shape-only template is built once per architecture and dtypes; every load gets its own Variables, and the
  cached template stays shape-only: changing a loaded model changes neither the template nor the next load."""
  import jax
  from compclip_jax.weights import loading
  template = loading._shape_only_template  # pylint: disable=protected-access
  first, _, _ = load_clip(str(hf_dir))
  before = _embed(first, batch)
  first.logit_scale.set_value(first.logit_scale[...] + 1.0)
  first.text_projection.kernel.set_value(first.text_projection.kernel[...] * 0)
  hits = template.cache_info().hits
  second, _, _ = load_clip(str(hf_dir))
  assert template.cache_info().hits == hits + 1
  assert second.text_projection.kernel is not first.text_projection.kernel
  for x, y in zip(before, _embed(second, batch)):
    np.testing.assert_array_equal(x, y)
  want = safetensors.torch.load_file(hf_dir / "model.safetensors")["logit_scale"].numpy()
  np.testing.assert_array_equal(np.asarray(second.logit_scale[...]), want)
  _, state, _ = template(second.cfg, DTypes(), DTypes(), False)
  assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(state))


def test_fill_leaves_its_template_abstract_so_two_fills_are_independent():
  """`params.fill` on one abstract model twice: two models with their own values (it used to write both into the
  template's shared Variables, so the first model silently took the second's values)."""
  import jax
  from flax import nnx
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  from compclip_jax.weights import params
  abstract = params.abstract(lambda rngs: CLIP(clip_config.tiny(), rngs=rngs))
  shapes = params.shapes(abstract)
  zeros = params.fill(abstract, {k: np.zeros(s, np.float32) for k, s in shapes.items()})
  ones = params.fill(abstract, {k: np.ones(s, np.float32) for k, s in shapes.items()})
  assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(nnx.state(abstract)))
  assert float(zeros.logit_scale[...]) == 0.0 and float(ones.logit_scale[...]) == 1.0
  assert not np.any(np.asarray(zeros.text_projection.kernel[...]))


def test_fill_names_every_missing_and_misshaped_parameter():
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  from compclip_jax.weights import params
  abstract = params.abstract(lambda rngs: CLIP(clip_config.tiny(), rngs=rngs))
  flat = {k: np.zeros(s, np.float32) for k, s in params.shapes(abstract).items()}
  del flat["logit_scale"]
  flat["text_projection.kernel"] = np.zeros((3, 3), np.float32)
  with pytest.raises(ValueError, match=r"no value for \['logit_scale'\].*text_projection.kernel: value \(3, 3\)"):
    params.fill(abstract, flat)


def test_an_abstract_build_walks_no_jaxpr_for_an_error_message(monkeypatch):
  """`params.abstract` stays linear in the model: no random draw makes a tracer build its AttributeError message,
  which walks the whole jaxpr traced so far (quadratic builds: 23–26 s for READ ViT-L/14 + T5-large before,
  docs/performance.md). The shapes themselves are pinned by the transformers shape tests."""
  from jax._src.interpreters import partial_eval
  from compclip_jax.models.siglip import config as sc
  from compclip_jax.models.siglip.model import SigLIP
  from compclip_jax.weights import params
  walks = []
  origin = partial_eval.DynamicJaxprTracer._origin_msg
  monkeypatch.setattr(partial_eval.DynamicJaxprTracer, "_origin_msg", lambda t: walks.append(1) or origin(t))
  model = params.abstract(lambda rngs: SigLIP(sc.tiny(), rngs=rngs))
  assert params.shapes(model) and not walks, len(walks)


def test_parameter_paths_are_nnx_own():
  """`params.variables` (jax pytree flattening, the fast path) names every parameter as nnx.state does."""
  from flax import nnx
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  from compclip_jax.models.layers import ShapeOnlyRngs
  from compclip_jax.models.t5 import T5Config, T5Decoder
  from compclip_jax.weights import params
  for model in (CLIP(clip_config.tiny(), rngs=ShapeOnlyRngs()),
                params.abstract(lambda rngs: T5Decoder(T5Config.v1_1(32, 2, 64), DTypes(), rngs=rngs))):
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    want = {".".join(map(str, p)): tuple(v.get_value().shape) for p, v in flat}
    assert params.shapes(model) == want
    assert [p for p, _ in params.variables(model)] and len(params.variables(model)) == len(want)


def test_a_bf16_tower_holds_the_checkpoint_rounded_as_torch_rounds(hf_dir):
  """fp32 checkpoint into bf16 vision parameters: each value is torch's own bf16 rounding of the file's value."""
  import torch
  model, _, _ = load_clip(str(hf_dir), vision_dtypes=DTypes(param="bfloat16"))
  sd = safetensors.torch.load_file(hf_dir / "model.safetensors")
  ours = flat_params(model)
  fc1 = "vision_model.encoder.layers.0.mlp.fc1"
  for path, key in ((f"{fc1}.kernel", f"{fc1}.weight"), ("vision_model.pre_layrnorm.scale",
                                                         "vision_model.pre_layrnorm.weight")):
    want = sd[key].to(torch.bfloat16).float().numpy()  # kernels in torch's layout [out, in], as the file has them
    np.testing.assert_array_equal(ours[path].astype(np.float32), want)
  assert ours["text_model.encoder.layers.0.mlp.fc1.kernel"].dtype == np.float32


def test_t5_decoder_params_loader(tmp_path):
  """`load_t5_decoder_params` (what training needs: config, numpy params, tokenizer) is what `load_t5_decoder`
  puts on the device; no spiece.model → no tokenizer, a named tokenizer file that is missing → an error naming it."""
  import transformers as tf
  from compclip_jax.weights.loading import load_t5_decoder, load_t5_decoder_params
  cfg = tf.T5Config(vocab_size=40, d_model=16, d_kv=4, d_ff=24, num_layers=1, num_decoder_layers=2, num_heads=4,
                    feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0)
  torch.manual_seed(0)
  ref = tf.T5ForConditionalGeneration(cfg)
  ref.save_pretrained(tmp_path)
  t5_cfg, flat, tok = load_t5_decoder_params(str(tmp_path))
  assert tok is None and t5_cfg.vocab_size == 40
  np.testing.assert_array_equal(flat["lm_head.kernel"], ref.lm_head.weight.detach().numpy())  # both [out, in]
  model, _ = load_t5_decoder(str(tmp_path))
  for k, v in flat_params(model).items():
    np.testing.assert_array_equal(v, flat[k], err_msg=k)
  with pytest.raises(FileNotFoundError, match="nowhere/spiece.model"):
    load_t5_decoder_params(str(tmp_path), tokenizer=str(tmp_path / "nowhere" / "spiece.model"))
