"""An export is the checkpoint it came from: an HF SigLIP or CLIP directory read by `load_clip` and written back by
`save_clip` (directly, through a compclip directory, or as training exports it: the model rebuilt from the config,
the source's config.json passed on) has the source's config.json, every key at every depth with its value, and its
tensors bit for bit. Fields the model defines are written over the source only where the model differs from it; a
model built without a source writes the config its architecture gives. The sources are random-init transformers
models saved here, with non-default token ids and other fields this project never reads."""
import dataclasses
import json

import pytest
import torch
import transformers
from flax import nnx

from compclip_jax.errors import InputError
from compclip_jax.models import clip_config
from compclip_jax.models.siglip import config as sc
from compclip_jax.weights import files, hf, loading, params
from compclip_jax.weights.loading import load_clip, save_clip

# buffers a transformers checkpoint may carry that are derived, not learned (hf.HF_CLIP_IGNORED)
BUFFERS = ("text_model.embeddings.position_ids", "vision_model.embeddings.position_ids")


def _siglip_source() -> transformers.SiglipConfig:
  text = {
      **sc.to_hf(sc.tiny())["text_config"], "bos_token_id": 5, "eos_token_id": 7, "pad_token_id": 3,
      "attention_dropout": 0.125, "hidden_act": "gelu", "layer_norm_eps": 1e-5
  }
  vision = {**sc.to_hf(sc.tiny())["vision_config"], "attention_dropout": 0.25, "layer_norm_eps": 1e-4}
  return transformers.SiglipConfig(text_config=text, vision_config=vision, initializer_factor=0.5,
                                   note="kept by every export")


def _clip_source() -> transformers.CLIPConfig:
  text = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=77, hidden_act="gelu", bos_token_id=998, eos_token_id=999, pad_token_id=0,
              projection_dim=24, attention_dropout=0.125, initializer_range=0.03)
  vision = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3, image_size=32,
                patch_size=8, hidden_act="gelu", projection_dim=40, initializer_factor=0.75, layer_norm_eps=1e-6)
  return transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=32, logit_scale_init_value=2.0,
                                 initializer_factor=0.5, note="kept by every export")


def _save(model: torch.nn.Module, directory):
  torch.manual_seed(0)
  with torch.no_grad():  # non-trivial norms and biases, so every tensor's bits are its own
    for name, p in model.named_parameters():
      if "norm" in name or name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
  model.save_pretrained(directory)
  return directory


@pytest.fixture(scope="module")
def siglip_dir(tmp_path_factory):
  torch.manual_seed(0)
  return _save(transformers.SiglipModel(_siglip_source()).eval(), tmp_path_factory.mktemp("siglip_src"))


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
  torch.manual_seed(0)
  return _save(transformers.CLIPModel(_clip_source()).eval(), tmp_path_factory.mktemp("clip_src"))


def _config(directory) -> dict:
  return json.loads((directory / "config.json").read_text())


def _differences(want, got, where="config.json") -> list[str]:
  """Every key (at every depth) whose value differs between two JSON values, or that only one of them has."""
  if isinstance(want, dict) and isinstance(got, dict):
    out = [f"{where}.{k}: only in the source ({want[k]!r})" for k in want if k not in got]
    out += [f"{where}.{k}: only in the export ({got[k]!r})" for k in got if k not in want]
    return out + [d for k in want if k in got for d in _differences(want[k], got[k], f"{where}.{k}")]
  return [] if (type(want), want) == (type(got), got) else [f"{where}: source {want!r}, export {got!r}"]


def _assert_same(want, got, where="config.json"):
  diffs = _differences(want, got, where)
  assert not diffs, "\n".join(diffs)


def _assert_same_checkpoint(src, out):
  """`out`'s config.json is `src`'s, key for key, and its tensors are `src`'s, bit for bit."""
  _assert_same(_config(src), _config(out))
  want = {k: v for k, v in files.read_hf_weights(str(src)).items() if k not in BUFFERS}
  got = files.read_hf_weights(str(out))
  assert sorted(got) == sorted(want)
  for k, v in want.items():
    assert got[k].dtype == v.dtype and got[k].shape == v.shape and got[k].tobytes() == v.tobytes(), k


def test_the_sources_have_fields_this_project_reads_as_defaults_or_not_at_all(siglip_dir, clip_dir):
  """The sources exercise what exports lost: token ids that are not transformers' defaults, fields no config of ours
  holds (dropout, initialisers, an unknown key) at the top level and in both towers."""
  s, c = _config(siglip_dir), _config(clip_dir)
  ids = lambda t: (t["bos_token_id"], t["eos_token_id"], t["pad_token_id"])
  assert ids(s["text_config"]) == (5, 7, 3) and ids(c["text_config"]) == (998, 999, 0)
  assert s["note"] == c["note"] == "kept by every export" and s["initializer_factor"] == 0.5
  assert s["text_config"]["attention_dropout"] == 0.125 and s["vision_config"]["attention_dropout"] == 0.25
  assert c["text_config"]["projection_dim"] == 24 and c["vision_config"]["projection_dim"] == 40
  assert c["logit_scale_init_value"] == 2.0 and c["vision_config"]["initializer_factor"] == 0.75


@pytest.mark.parametrize("family", ["siglip", "clip"])
def test_an_hf_export_is_the_checkpoint_it_came_from(family, siglip_dir, clip_dir, tmp_path):
  src = siglip_dir if family == "siglip" else clip_dir
  model, tok, pre = load_clip(str(src))
  assert loading.source_config_of(model) == _config(src)
  save_clip(model, str(tmp_path / "out"), "hf", tokenizer=tok, preprocess=pre)
  _assert_same_checkpoint(src, tmp_path / "out")
  again, _, _ = load_clip(str(tmp_path / "out"))  # and its export's export
  save_clip(again, str(tmp_path / "again"), "hf")
  _assert_same_checkpoint(src, tmp_path / "again")


def test_a_clip_export_through_a_compclip_directory_is_the_checkpoint_it_came_from(clip_dir, tmp_path):
  model, _, _ = load_clip(str(clip_dir))
  save_clip(model, str(tmp_path / "cc"), "compclip")
  assert loading.read_source_config(str(tmp_path / "cc")) == _config(clip_dir)
  back, _, _ = load_clip(str(tmp_path / "cc"))
  save_clip(back, str(tmp_path / "out"), "hf")
  _assert_same_checkpoint(clip_dir, tmp_path / "out")


@pytest.mark.parametrize("family", ["siglip", "clip"])
def test_a_model_rebuilt_from_its_config_exports_the_source_config_it_is_given(family, siglip_dir, clip_dir, tmp_path):
  """As training exports: parameters read (`load_clip_params`), a model built from the config and filled, written
  with the source's config.json passed on (`read_source_config`), which such a model does not carry itself."""
  src = siglip_dir if family == "siglip" else clip_dir
  cfg, flat, _, _, _ = loading.load_clip_params(str(src))
  model = params.fill(params.abstract(lambda rngs: loading.model_class(cfg)(cfg, rngs=rngs)), flat)
  assert loading.source_config_of(model) is None
  save_clip(model, str(tmp_path / "out"), "hf", source_config=loading.read_source_config(str(src)))
  _assert_same_checkpoint(src, tmp_path / "out")


@pytest.mark.parametrize("family", ["siglip", "clip"])
def test_a_minimal_config_json_is_written_back_minimal(family, siglip_dir, clip_dir, tmp_path):
  """Keys the source lacks stay absent (transformers' defaults, e.g. SigLIP's eos_token_id 49407, CLIP's
  bos_token_id 49406), so transformers reads the export's config as it reads the source's."""
  src = siglip_dir if family == "siglip" else clip_dir
  full = _config(src)
  shape_keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "max_position_embeddings", "image_size", "patch_size", "hidden_act", "layer_norm_eps")
  minimal = {k: full[k] for k in ("model_type", "projection_dim") if k in full}
  for tower in ("text_config", "vision_config"):
    minimal[tower] = {k: v for k, v in full[tower].items() if k in shape_keys}
  (tmp_path / "src").mkdir()
  (tmp_path / "src" / "config.json").write_text(json.dumps(minimal))
  (tmp_path / "src" / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
  model, _, _ = load_clip(str(tmp_path / "src"))
  save_clip(model, str(tmp_path / "out"), "hf")
  _assert_same_checkpoint(tmp_path / "src", tmp_path / "out")
  kind = transformers.SiglipConfig if family == "siglip" else transformers.CLIPConfig
  read = lambda d: {k: v for k, v in kind.from_pretrained(str(d)).to_dict().items() if k != "transformers_version"}
  _assert_same(read(tmp_path / "src"), read(tmp_path / "out"), "transformers' config")


def test_what_the_model_defines_is_written_over_its_source_only_where_it_differs(clip_dir):
  """A reshaped model (another input size, end token) writes its own values: into the tower, into the legacy
  `vision_config_dict` that transformers lets win, and as a key its source lacked; every other field stays the
  source's. The tensors' dtype is float32, what an export writes."""
  source = _config(clip_dir)
  del source["text_config"]["eos_token_id"]  # transformers' default, 49407
  source["vision_config_dict"] = {"image_size": 32, "patch_size": 8}
  source["dtype"] = "bfloat16"
  cfg = clip_config.from_hf_dict(source)
  cfg = cfg.replace(vision=dataclasses.replace(cfg.vision, image_size=64),
                    text=dataclasses.replace(cfg.text, eos_token_id=997))
  got = hf.export_config(cfg, source)
  want = json.loads(json.dumps(source))
  want["vision_config"]["image_size"] = want["vision_config_dict"]["image_size"] = 64
  want["text_config"]["eos_token_id"] = 997
  want["dtype"] = "float32"
  _assert_same(want, got)
  assert _differences(source, hf.export_config(clip_config.from_hf_dict(source),
                                               source)) == ["config.json.dtype: source 'bfloat16', export 'float32'"]


@pytest.mark.parametrize("family", ["siglip", "clip"])
def test_a_model_without_a_source_writes_the_config_its_architecture_gives(family, tmp_path):
  cfg = sc.tiny() if family == "siglip" else clip_config.tiny()
  model = loading.model_class(cfg)(cfg, rngs=nnx.Rngs(0))
  assert loading.source_config_of(model) is None
  save_clip(model, str(tmp_path / "out"), "hf")
  want = sc.to_hf(cfg) if family == "siglip" else clip_config.to_hf_dict(cfg)
  _assert_same(want, _config(tmp_path / "out"))


def test_the_other_familys_config_is_refused_before_anything_is_written(siglip_dir, clip_dir, tmp_path):
  model, _, _ = load_clip(str(clip_dir))
  for fmt in ("hf", "compclip"):
    with pytest.raises(InputError, match="cannot be written back with a CLIPConfig model"):
      save_clip(model, str(tmp_path / fmt), fmt, source_config=_config(siglip_dir))
    assert not (tmp_path / fmt).exists()
  siglip, _, _ = load_clip(str(siglip_dir))
  with pytest.raises(InputError, match="cannot be written back with a SiglipConfig model"):
    save_clip(siglip, str(tmp_path / "s"), "hf", source_config=_config(clip_dir))
  assert not (tmp_path / "s").exists()
  assert loading.source_config_of(model) == _config(clip_dir)  # the model's own is unchanged
