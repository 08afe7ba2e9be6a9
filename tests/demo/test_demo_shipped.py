"""The demo's shipped starting points, one per tower family (compclip_jax/assets/demo_pretrained, …_siglip): their
files match the SHA-256s their manifest records, they load as the HF CLIP / SiglipModel / T5 directories they claim to
be, a changed file is refused by name, and the manifest says how to make it again. The regeneration itself (15–23 min
on 2 cores per family) is the manual tier (COMPCLIP_MANUAL_TESTS=1): it retrains from scratch and compares the
diagnostics with the recorded ones."""
import json
import os
import shutil

import numpy as np
import pytest

from compclip_jax.demo import diagnose as diagnostics
from compclip_jax.demo import pretrain
from compclip_jax.demo import run as demo
from compclip_jax.demo import shipped as demo_shipped
from compclip_jax.weights import loading
from compclip_jax.assets import SYNTHETIC_SPIECE
from compclip_jax.data.synthetic import scenes as synthetic
from compclip_jax.weights import files


@pytest.mark.parametrize("family", demo_shipped.FAMILIES)
def test_shipped_files_match_their_recorded_hashes_and_nothing_else_is_there(family):
  root = demo_shipped.root(family)
  record = demo_shipped.read_manifest(root)
  clip_dir, t5_dir = demo_shipped.check(root)
  assert clip_dir == os.path.join(root, "clip") and t5_dir == os.path.join(root, "t5")
  on_disk = {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}
  assert on_disk == set(record["files"]) | {demo_shipped.MANIFEST}
  for rel, digest in record["files"].items():  # hashlib once more, independently of check()
    import hashlib  # pylint: disable=import-outside-toplevel
    assert hashlib.sha256(open(os.path.join(root, rel), "rb").read()).hexdigest() == digest
  # how it was made: the command, its seed and stage options, the world
  assert record["command"].startswith(demo_shipped.regenerate(family)) and record["seed"] == 0
  assert set(record["options"]) == {f for f in pretrain.DemoOptions.__dataclass_fields__}
  assert record["options"]["family"] == family
  # pretrained on the world this code writes (its format included): a stale starting point is caught here
  assert record["world"] == synthetic.world_record(demo.demo_config("clic").data.synthetic_size, 0)


@pytest.mark.parametrize("family", demo_shipped.FAMILIES)
def test_shipped_models_load_and_are_the_demo_starting_point(tmp_path, family):
  clip_dir, t5_dir = demo_shipped.check(demo_shipped.root(family))
  model, tok, pre = loading.load_clip(clip_dir)
  assert model.cfg.vision.image_size == 64 and model.cfg.text.width == 64 and pre.size == 64
  assert type(model).__name__ == {"clip": "CLIP", "siglip": "SigLIP"}[family] and pre.squash == (family == "siglip")
  ids = tok(["a red square to the left of a blue circle"])
  emb = np.asarray(model.encode_text(ids, normalize=True))
  assert emb.shape == (1, 128) and np.isfinite(emb).all()
  t5_cfg, t5_flat, t5_tok = loading.load_t5_decoder_params(t5_dir, tokenizer=SYNTHETIC_SPIECE)
  assert t5_cfg.vocab_size == t5_tok.sp.get_piece_size() and all(np.isfinite(v).all() for v in t5_flat.values())
  stored = files.read_safetensors(os.path.join(clip_dir, "model.safetensors"))
  assert {v.dtype for v in stored.values()} == {np.dtype(np.float16)}  # shipped in fp16, trained in fp32
  c = demo.demo_config("read")
  assert pretrain.starting_point(c, str(tmp_path), pretrain.DemoOptions(family=family)) == (clip_dir, t5_dir)
  assert not os.listdir(tmp_path)  # nothing pretrained


def test_a_changed_or_missing_file_is_refused_by_name(tmp_path):
  root = tmp_path / "shipped"
  shutil.copytree(demo_shipped.SHIPPED, root)
  weights = root / "clip" / "model.safetensors"
  data = bytearray(weights.read_bytes())
  data[-1] ^= 1
  weights.write_bytes(bytes(data))
  with pytest.raises(ValueError, match=r"clip/model.safetensors does not match its recorded SHA-256") as e:
    demo_shipped.check(str(root))
  assert demo_shipped.REGENERATE in str(e.value)
  (root / "t5" / "config.json").unlink()
  with pytest.raises(ValueError, match=r"t5/config.json is missing"):
    demo_shipped.check(str(root))
  with pytest.raises(FileNotFoundError, match="--from_scratch"):
    demo_shipped.check(str(tmp_path / "nothing_here"))


def test_write_stores_fp16_weights_and_their_hashes(tmp_path):
  clip_dir, t5_dir = demo_shipped.check()
  manifest = demo_shipped.write(str(tmp_path / "out"), clip_dir, t5_dir, {"command": "x"})
  assert manifest["files"] == demo_shipped.read_manifest()["files"]  # fp16 of fp16: the same bytes
  weights = tmp_path / "out" / "clip" / "model.safetensors"
  stamp = weights.stat().st_mtime_ns
  demo_shipped.write(str(tmp_path / "out"), clip_dir, t5_dir, {"command": "y"})  # the same files again
  assert weights.stat().st_mtime_ns == stamp and not list((tmp_path / "out").rglob("*.tmp"))
  assert json.load(open(tmp_path / "out" / demo_shipped.MANIFEST))["command"] == "y"  # the record, rewritten
  assert demo_shipped.check(str(tmp_path / "out"))[0] == str(tmp_path / "out" / "clip")


@pytest.mark.slow
@pytest.mark.manual
@pytest.mark.parametrize("family", demo_shipped.FAMILIES)
def test_regenerating_the_shipped_model_reproduces_its_diagnostics(tmp_path, family):
  """Manual tier: the recorded command, from scratch, gives a model with the recorded probes and gaps (±3 points;
  the bytes themselves may differ across machines and XLA versions)."""
  record = demo_shipped.read_manifest(demo_shipped.root(family))
  opts = {k: v for k, v in record["options"].items() if k != "from_scratch"}
  c = demo.demo_config("clic")
  c.seed = record["seed"]
  out = tmp_path / "out"
  pretrain.write_pretrained(c, str(tmp_path / "work"), str(out), pretrain.DemoOptions(**opts, from_scratch=True))
  got = diagnostics.diagnose(str(out / "clip"), str(tmp_path / "work"), record["seed"])
  want = record["diagnostics"]
  for side in ("image", "text"):
    for key in ("bag", "binding"):
      assert abs(got["probes"][side][key] - want["probes"][side][key]) < 0.03, (side, key)
  for key, value in want["sugarcrepe"].items():
    assert abs(got["sugarcrepe"][key] - value) < 0.03, key
