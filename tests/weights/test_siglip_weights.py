"""HF SigLIP directories in and out through `load_clip` / `save_clip`: a random-init transformers `SiglipModel` saved
with its SiglipTokenizer (a SentencePiece model trained here) and SiglipImageProcessor loads as our SigLIP with the
same ids, pixels, embeddings and logits (≤ 1e-5); the export loads back into transformers bit for bit, and
`AutoProcessor` reads it. The same for a SigLIP 2 (fixed resolution) directory with a Gemma-like tokenizer."""
import json

import numpy as np
import pytest
import torch
import transformers
from PIL import Image

from compclip_jax.data.tokenizers import GemmaTokenizer, SiglipTokenizer
from compclip_jax.errors import InputError
from compclip_jax.models.siglip import config as sc
from compclip_jax.models.siglip.model import SigLIP
from compclip_jax.weights.loading import load_clip, load_clip_meta, save_clip

TOL = 1e-5
TEXTS = ["A red shirt man on a gray horse.", "a gray shirt man, on a red horse!", "Two dogs play in the snow", "a cat"]


def _cfg(vocab_size: int = 300) -> sc.SiglipConfig:
  base = sc.tiny()
  return sc.SiglipConfig(sc.TextConfig(**{**base.text.__dict__, "vocab_size": vocab_size}), base.vision)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  import sentencepiece as spm
  d = tmp_path_factory.mktemp("siglip")
  corpus = [
      f"a {c} {s} man on a {c2} horse" for c in ("red", "gray", "blue") for s in ("shirt", "hat", "coat")
      for c2 in ("red", "gray", "white")
  ] + [t.lower() for t in TEXTS] * 3
  spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(d / "spiece"), vocab_size=60,
                                 pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False, minloglevel=2,
                                 num_threads=1)
  torch.manual_seed(0)
  model = transformers.SiglipModel(transformers.SiglipConfig(**sc.to_hf(_cfg()))).eval()
  with torch.no_grad():  # non-trivial norms, biases, scale and bias
    for name, p in model.named_parameters():
      if "norm" in name or name.endswith("bias"):
        p.add_(0.1 * torch.randn_like(p))
    model.logit_scale.fill_(2.3)
    model.logit_bias.fill_(-3.0)
  model.save_pretrained(d)
  transformers.SiglipTokenizer(vocab_file=str(d / "spiece.model"), model_max_length=16).save_pretrained(d)
  transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d)
  return d, model


def _image():
  rng = np.random.default_rng(0)
  return Image.fromarray(rng.integers(0, 256, (45, 70, 3), dtype=np.uint8))  # wide: squashed, not cropped


def _theirs(model, ids, pixels):
  with torch.no_grad():
    out = model(input_ids=torch.from_numpy(np.asarray(ids)).long(),
                pixel_values=torch.from_numpy(np.asarray(pixels)).permute(0, 3, 1, 2))
  return out.logits_per_text.numpy()


def test_an_hf_siglip_directory_loads_as_siglip_with_its_tokenizer_and_transform(hf_dir):
  d, hf = hf_dir
  model, tok, pre = load_clip(str(d))
  assert isinstance(model, SigLIP) and isinstance(tok, SiglipTokenizer) and pre.squash
  ref_tok = transformers.SiglipTokenizer.from_pretrained(str(d))
  want_ids = ref_tok(TEXTS, padding="max_length", max_length=16, truncation=True, return_tensors="np")["input_ids"]
  np.testing.assert_array_equal(tok(TEXTS), want_ids)
  want_px = transformers.SiglipImageProcessor.from_pretrained(str(d))(_image(), return_tensors="np")["pixel_values"]
  pixels = pre(_image())[None]
  np.testing.assert_allclose(pixels, want_px.transpose(0, 2, 3, 1), atol=1e-6)
  _, per_text = model(tok(TEXTS), pixels)
  np.testing.assert_allclose(np.asarray(per_text), _theirs(hf, want_ids, pixels), atol=TOL, rtol=TOL)
  cfg, meta_tok, meta_pre = load_clip_meta(str(d))  # the compile check's read: config and tokenizer, no weights
  assert cfg == model.cfg and meta_tok(TEXTS).tolist() == tok(TEXTS).tolist() and meta_pre == pre


def test_save_clip_writes_a_directory_transformers_and_autoprocessor_load(hf_dir, tmp_path):
  d, hf = hf_dir
  model, tok, pre = load_clip(str(d))
  save_clip(model, str(tmp_path / "out"), tokenizer=tok, preprocess=pre)
  back = transformers.SiglipModel.from_pretrained(str(tmp_path / "out")).eval()
  theirs, ours = hf.state_dict(), back.state_dict()
  assert sorted(theirs) == sorted(ours)
  for k, v in theirs.items():
    torch.testing.assert_close(ours[k], v, rtol=0, atol=0, msg=k)
  proc = transformers.AutoProcessor.from_pretrained(str(tmp_path / "out"))
  got = proc(text=TEXTS, images=_image(), padding="max_length", max_length=16, truncation=True, return_tensors="np")
  np.testing.assert_array_equal(got["input_ids"], tok(TEXTS))
  np.testing.assert_allclose(got["pixel_values"].transpose(0, 2, 3, 1), pre(_image())[None], atol=1e-6)
  again, tok2, pre2 = load_clip(str(tmp_path / "out"))  # and ours reads its own export
  assert again.cfg == model.cfg and tok2(TEXTS).tolist() == tok(TEXTS).tolist() and pre2 == pre


def test_without_a_preprocessor_config_the_transform_is_siglips(hf_dir, tmp_path):
  d, _ = hf_dir
  for name in ("config.json", "model.safetensors"):
    (tmp_path / name).write_bytes((d / name).read_bytes())
  _, tok, pre = load_clip(str(tmp_path))
  assert tok is None and pre.squash and pre.mean == pre.std == (0.5, 0.5, 0.5) and pre.size == 32


def test_siglip_mistakes_are_one_line(hf_dir, tmp_path):
  d, _ = hf_dir
  model, _, _ = load_clip(str(d))
  with pytest.raises(InputError, match="format='hf'.*or 'open_clip'"):
    save_clip(model, str(tmp_path / "x"), format="compclip")
  naflex = json.loads((d / "config.json").read_text()) | {"model_type": "siglip2"}
  (tmp_path / "naflex").mkdir()
  (tmp_path / "naflex" / "config.json").write_text(json.dumps(naflex))
  with pytest.raises(InputError, match="NaFlex"):
    load_clip(str(tmp_path / "naflex"))
  with pytest.raises(InputError, match="no attention_mask"):  # transformers 5's tokenizer returns one: a trap
    model.encode_text(np.ones((1, 16), np.int32), attention_mask=np.ones((1, 16), np.int32))
  small = json.loads((d / "config.json").read_text())
  small["text_config"]["vocab_size"] = 8  # fewer ids than spiece.model has pieces: another model's tokenizer
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "spiece.model").write_bytes((d / "spiece.model").read_bytes())
  (tmp_path / "other" / "config.json").write_text(json.dumps(small))
  with pytest.raises(InputError, match="pieces, more than the text tower's vocab_size 8"):
    load_clip_meta(str(tmp_path / "other"))  # the compile check's read: config and tokenizer, no weights


def test_the_evaluation_encoder_gives_siglips_own_embeddings(hf_dir):
  """evaluators' Encoder on a SigLIP: the full-width rows (no padding trimmed: the last position is pooled), the
  embeddings transformers gives, normalised."""
  from compclip_jax.evaluators.encoding import Encoder
  d, hf = hf_dir
  model, tok, pre = load_clip(str(d))
  got = Encoder(model, tok, pre, batch_size=8, progress=False).texts(TEXTS)
  with torch.no_grad():
    want = hf.get_text_features(input_ids=torch.from_numpy(tok(TEXTS)).long())
  want = getattr(want, "pooler_output", want).numpy()
  np.testing.assert_allclose(got, want / np.linalg.norm(want, axis=-1, keepdims=True), atol=TOL)


def test_convert_rewrites_a_siglip_directory(hf_dir, tmp_path):
  """`python -m compclip_jax convert --src=DIR --dst=OUT --to=hf` on a SigLIP: the same model in transformers."""
  import io
  from compclip_jax.cli.convert import convert
  d, hf = hf_dir
  out = io.StringIO()
  convert(str(d), str(tmp_path / "out"), "hf", out=out)
  assert "tokenizer: sentencepiece" in out.getvalue() and "embed 32" in out.getvalue()
  back = transformers.SiglipModel.from_pretrained(str(tmp_path / "out")).state_dict()
  for k, v in hf.state_dict().items():
    torch.testing.assert_close(back[k], v, rtol=0, atol=0, msg=k)


def _corpus():
  return [
      f"a {c} {s} man on a {c2} horse" for c in ("red", "gray", "blue") for s in ("shirt", "hat", "coat")
      for c2 in ("red", "gray", "white")
  ] + [t.lower() for t in TEXTS] * 3


@pytest.fixture(scope="module")
def siglip2_dir(tmp_path_factory):
  """A SigLIP 2 (fixed resolution) directory: a random-init transformers `SiglipModel` whose vocabulary is a Gemma-like
  tokenizer's, saved with that tokenizer as transformers saves SigLIP 2's (tokenizer.model, tokenizer.json,
  tokenizer_config.json: GemmaTokenizer, no BOS, EOS, right padding) and a SiglipImageProcessor."""
  from tests.data.test_gemma_tokenizer import gemma_model, hf_gemma
  d = tmp_path_factory.mktemp("siglip2")
  gemma_model(d, _corpus(), vocab_size=330)
  ref = hf_gemma(d, model_max_length=16, model_input_names=["input_ids"])
  ref.save_pretrained(d)
  torch.manual_seed(0)
  model = transformers.SiglipModel(transformers.SiglipConfig(**sc.to_hf(_cfg(ref.vocab_size)))).eval()
  model.save_pretrained(d)
  transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d)
  return d, model


def _lower(texts):
  return [t.lower() for t in texts]  # what SigLIP 2 users are told to do: transformers' GemmaTokenizer does not


def test_a_siglip2_directory_loads_with_its_gemma_tokenizer(siglip2_dir):
  d, hf = siglip2_dir
  assert {"tokenizer.model", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in d.iterdir()}
  model, tok, pre = load_clip(str(d))
  assert isinstance(model, SigLIP) and isinstance(tok, GemmaTokenizer) and tok.context_length == 16
  ref_tok = transformers.AutoTokenizer.from_pretrained(str(d))
  assert type(ref_tok).__name__ == "GemmaTokenizer"
  want_ids = ref_tok(_lower(TEXTS), padding="max_length", max_length=16, truncation=True,
                     return_tensors="np")["input_ids"]
  np.testing.assert_array_equal(tok(TEXTS), want_ids)
  assert (want_ids == 0).any() and (want_ids[:, 0] != 2).all()  # <pad> 0 padding, no BOS
  pixels = pre(_image())[None]
  _, per_text = model(tok(TEXTS), pixels)
  np.testing.assert_allclose(np.asarray(per_text), _theirs(hf, want_ids, pixels), atol=TOL, rtol=TOL)
  _, meta_tok, _ = load_clip_meta(str(d))
  assert isinstance(meta_tok, GemmaTokenizer) and meta_tok(TEXTS).tolist() == tok(TEXTS).tolist()


def test_a_siglip2_export_gives_transformers_our_ids(siglip2_dir, tmp_path):
  """save_clip writes the Gemma tokenizer's files (tokenizer.json copied): AutoProcessor / AutoTokenizer on the export
  give our ids for the lower-cased texts, and load_clip reads the export back with the same tokenizer."""
  d, hf = siglip2_dir
  model, tok, pre = load_clip(str(d))
  written = save_clip(model, str(tmp_path / "out"), tokenizer=tok, preprocess=pre)
  names = {p.rsplit("/", 1)[1] for p in written}
  assert {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= names
  proc = transformers.AutoProcessor.from_pretrained(str(tmp_path / "out"))
  got = proc(text=_lower(TEXTS), images=_image(), padding="max_length", max_length=16, truncation=True,
             return_tensors="np")
  np.testing.assert_array_equal(got["input_ids"], tok(TEXTS))
  ref_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
  long = ["A red shirt man on a gray horse " * 4]  # truncated: EOS kept last
  want = ref_tok(_lower(TEXTS + long), padding="max_length", max_length=16, truncation=True)["input_ids"]
  np.testing.assert_array_equal(np.asarray(want), tok(TEXTS + long))
  assert tok(long)[0, -1] == tok.eos_id
  back = transformers.SiglipModel.from_pretrained(str(tmp_path / "out")).state_dict()
  for k, v in hf.state_dict().items():
    torch.testing.assert_close(back[k], v, rtol=0, atol=0, msg=k)
  again, tok2, _ = load_clip(str(tmp_path / "out"))
  assert isinstance(tok2, GemmaTokenizer) and tok2(TEXTS).tolist() == tok(TEXTS).tolist()


def test_siglip2_tokenizer_mistakes(siglip2_dir, tmp_path, caplog):
  d, _ = siglip2_dir
  small = json.loads((d / "config.json").read_text())
  small["text_config"]["vocab_size"] = 8  # fewer ids than tokenizer.model has pieces: another model's tokenizer
  (tmp_path / "other").mkdir()
  (tmp_path / "other" / "tokenizer.model").write_bytes((d / "tokenizer.model").read_bytes())
  (tmp_path / "other" / "config.json").write_text(json.dumps(small))
  with pytest.raises(InputError, match="tokenizer.model: .* pieces, more than the text tower's vocab_size 8"):
    load_clip_meta(str(tmp_path / "other"))
  (tmp_path / "json_only").mkdir()  # tokenizer.json without tokenizer.model: not read, one warning
  for name in ("config.json", "tokenizer.json"):
    (tmp_path / "json_only" / name).write_bytes((d / name).read_bytes())
  _, tok, _ = load_clip_meta(str(tmp_path / "json_only"))
  assert tok is None and "tokenizer.json alone is not read" in caplog.text
