"""Every method trains a SigLIP (docs/siglip.md, "Methods on SigLIP"): `:runlocal` with `model.random=siglip_tiny`,
and CLIC from an HF SiglipModel directory that transformers wrote. The exports are HF SiglipModel directories that
transformers loads and that give transformers our trained model's logits; the frozen vision tower comes back bit for
bit; SigLIP's padded rows are never trimmed; what cannot work is one line before anything trains."""
import dataclasses
import os

import numpy as np
import pytest

from tests import worlds
from compclip_jax import methods
from compclip_jax.errors import UserError
from compclip_jax.train import loop as train
from compclip_jax.train import state, trainer
from compclip_jax.weights import loading
from configs import clic, clic_read, clip, negclip, read

pytestmark = pytest.mark.slow  # every test here trains

CONFIGS = {"clic": clic, "read": read, "negclip": negclip, "clip": clip, "clic_read": clic_read}


def _cfg(method, **overrides):
  c = CONFIGS[method].get_config("runlocal")
  c.model.random = state.SIGLIP_RANDOM
  c.evals.benchmarks = ()
  c.total_steps, c.checkpoint.every_steps = 4, 4
  for key, value in overrides.items():
    section, name = key.split(".")
    c[section][name] = value
  return worlds.use_shared_world(c)


def _transformers_logits(export_dir, ids, pixels):
  import torch
  import transformers
  model = transformers.SiglipModel.from_pretrained(export_dir).eval()
  with torch.no_grad():
    out = model(input_ids=torch.from_numpy(np.asarray(ids)).long(),
                pixel_values=torch.from_numpy(np.asarray(pixels).transpose(0, 3, 1, 2)))
  return out.logits_per_text.numpy()


@pytest.mark.parametrize("method", sorted(CONFIGS))
def test_every_method_trains_a_siglip_and_exports_an_hf_siglipmodel(tmp_path, method):
  last = train.run(_cfg(method, **({"export.open_clip": True} if method == "clic" else {})), str(tmp_path))
  assert np.isfinite(last["loss"])
  export = tmp_path / "export" / "hf"
  ours, tok, pre = loading.load_clip(str(export))
  assert type(ours).__name__ == "SigLIP" and tok.trims_padding is False and pre.squash
  ids = tok(["a small red heart above a large blue star outdoors", "a gray ring"])
  pixels = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
  from flax import nnx
  _, per_text = nnx.jit(lambda m, i, x: m(i, x))(ours, ids, pixels)  # one program, not ~150 eager ops
  np.testing.assert_allclose(_transformers_logits(export, ids, pixels), np.asarray(per_text), atol=1e-5)
  # the bias trained with the text side (it starts at −10); the vision tower is frozen where the method says so
  assert float(ours.logit_bias[...][0]) != -10.0
  if method == "clic":  # the open_clip export holds the same weights (read as open_clip runs them: exact GELU in
    # timm's trunk, where this tiny tower computes the tanh one — the export says so; weights/open_clip_siglip.py)
    again, _, _ = loading.load_clip(str(tmp_path / "export" / "open_clip" / "model.safetensors"))
    a, b = _flat(again), _flat(ours)
    assert a.keys() == b.keys() and all(np.array_equal(a[k].get_value(), b[k].get_value()) for k in a)
  if method == "clic":  # convert from the run's latest checkpoint writes training's own export, file for file
    from compclip_jax.train import export as export_run
    _, written = export_run.export_run(*export_run.run_source(str(tmp_path)), str(tmp_path / "converted"))
    hf_files = sorted(os.path.relpath(p, tmp_path / "converted" / "hf") for p in written if "/hf/" in p)
    assert any(p.endswith("open_clip/model.safetensors") for p in written)
    assert hf_files == sorted(os.listdir(export))
    for f in hf_files:
      assert (tmp_path / "converted" / "hf" / f).read_bytes() == (export / f).read_bytes(), f
  if method in ("clic", "negclip", "clip"):
    init = state.build_model(_cfg(method), methods.get(method)).flat
    back = {k: np.asarray(v.get_value()) for k, v in _flat(ours).items() if k.startswith("vision_model.")}
    assert back and all(np.array_equal(back[k], np.asarray(init[k])) for k in back)


def _flat(model):
  from flax import nnx
  return {".".join(map(str, p)): v for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _hf_siglip_dir(d):
  """A random-init transformers SiglipModel of the tiny shape with SigLIP's 64 text positions, saved with a
  SentencePiece tokenizer (the bundled one, trained on the synthetic world's words) and SiglipImageProcessor's
  config: what a user's SigLIP checkpoint directory holds."""
  import shutil

  import sentencepiece as spm
  import torch
  import transformers
  from compclip_jax import assets
  from compclip_jax.models.siglip import config as sc
  shutil.copyfile(assets.SYNTHETIC_SPIECE, d / "spiece.model")
  pieces = spm.SentencePieceProcessor(model_file=str(d / "spiece.model")).get_piece_size()
  tiny = sc.tiny()  # 64 positions: far wider than these captions, which a trimmed row would show
  tiny = dataclasses.replace(tiny, text=dataclasses.replace(tiny.text, context_length=64, vocab_size=pieces))
  torch.manual_seed(0)
  transformers.SiglipModel(transformers.SiglipConfig(**sc.to_hf(tiny))).save_pretrained(d)
  transformers.SiglipTokenizer(vocab_file=str(d / "spiece.model"), model_max_length=64).save_pretrained(d)
  transformers.SiglipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d)
  return d


def test_clic_trains_from_an_hf_siglip_directory_with_untrimmed_rows(tmp_path):
  d = _hf_siglip_dir(tmp_path)
  c = _cfg("clic")
  c.model.random, c.model.init = "", str(d)
  t = trainer.setup(c, str(tmp_path / "run"))
  assert t.model.preprocess_squash
  for kind in t.kinds:  # SigLIP pools the last position: its rows keep the tokenizer's full width
    ids = t.global_batch(kind)["ids"]
    assert ids.shape[-1] == t.model.tokenizer.context_length == 64
    assert np.all(np.asarray(ids)[..., 40:] == 1)  # EOS-padded: the captions end well before
  last = train.run(c, str(tmp_path / "run"))
  assert np.isfinite(last["loss"])
  ours, tok, _ = loading.load_clip(str(tmp_path / "run" / "export" / "hf"))
  start, _, _ = loading.load_clip(str(d))
  same = lambda a, b: np.array_equal(np.asarray(a[...]), np.asarray(b[...]))
  assert same(ours.vision_model.head.probe, start.vision_model.head.probe)  # frozen, exported as it was read
  assert not same(ours.text_model.head.kernel, start.text_model.head.kernel)  # trained
  import transformers
  proc = transformers.AutoProcessor.from_pretrained(tmp_path / "run" / "export" / "hf")
  text = "a gray shirt man on a red horse"
  assert proc.tokenizer([text], padding="max_length", max_length=tok.context_length,
                        truncation=True)["input_ids"] == tok([text]).tolist()


def test_what_a_siglip_run_cannot_do_is_one_line_before_training(tmp_path):
  c = _cfg("clic")
  c.siglip.negatives = "rows"
  with pytest.raises(UserError, match="siglip.negatives 'rows'"):
    train.run(c, str(tmp_path / "b"))


def test_prepared_crops_are_refused_for_a_siglip_whatever_their_source():
  """`prepare`'s images are CLIP's centre crops, in its folder or its `--format=tfds` dataset (a TfdsSource whose
  `prepared` is True): a SigLIP resizes the whole image, so either is one line, and a sample never uses one."""
  from compclip_jax.data import samples

  class PreparedTfds:  # what data/tfds_source.py gives for a dataset `prepare --format=tfds` wrote
    prepared = True

  with pytest.raises(UserError, match="prepared images are CLIP's resize"):
    trainer._check_prepared(_cfg("clic"), methods.get("clic"), PreparedTfds(), 32, squash=True)  # pylint: disable=protected-access
  trainer._check_prepared(_cfg("clic"), methods.get("clic"), PreparedTfds(), 32, squash=False)  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="a prepared image is a centre crop"):
    samples.eval_image({"id": 7, "full": b""}, 32, squash=True)


def test_the_softmax_switch_trains_the_clip_forms_and_leaves_the_bias_untouched(tmp_path):
  """`siglip.contrastive="softmax"`: every term is the reference's softmax form, in which a bias added to every
  logit cancels, so the bias gets no gradient (it is in no_decay: it stays at −10 to the bit) while the text side
  trains; the run logs the CLIP step's InfoNCE terms, not a sigmoid."""
  c = _cfg("clic", **{"siglip.contrastive": "softmax"})
  last = train.run(c, str(tmp_path))
  assert np.isfinite(last["loss"])
  ours, _, _ = loading.load_clip(str(tmp_path / "export" / "hf"))
  assert np.asarray(ours.logit_bias[...]).tolist() == [-10.0]
  init = state.build_model(_cfg("clic"), methods.get("clic")).flat
  assert not np.array_equal(np.asarray(ours.text_model.head.kernel[...]), np.asarray(init["text_model.head.kernel"]))
  import json
  with open(tmp_path / "metrics.jsonl") as f:
    logged = set().union(*(json.loads(line) for line in f))
  assert "clic/cont" in logged and "clip/sigmoid" not in logged
