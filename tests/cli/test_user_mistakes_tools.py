"""The one-line contract of the tools (`evaluate`, `convert`, `prepare`): a user mistake is one stderr line (what,
where, what to do), exit 2, no traceback, nothing written; `--help` exits 0. The real commands run in subprocesses
(a mistake is answered before jax is imported: ~1 s each); skipping unreadable images and prepare's skip limit are
checked at function level. The export from a checkpoint is checked on test_train's CLIC :runlocal run (no training
of its own): `export_from_any_checkpoint_is_trainings_export`, which tests/train/test_train.py calls."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from compclip_jax.errors import UserError
from tests import data_fixtures as df
from tests import paths

ENV = {**os.environ, "PYTHONPATH": paths.ROOT, "JAX_PLATFORMS": "cpu"}


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "compclip_jax", tool, *args], cwd=paths.ROOT, capture_output=True,
                        text=True, env=ENV, timeout=300)


def _files(folder) -> set[str]:
  return {os.path.relpath(os.path.join(r, n), folder) for r, _, names in os.walk(folder) for n in names}


def _one_line(proc: subprocess.CompletedProcess) -> str:
  """The one stderr line of a refused command (exit 2, no traceback)."""
  assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
  lines = [x for x in proc.stderr.splitlines() if x.strip()]
  assert len(lines) == 1, proc.stderr[-3000:]
  return lines[0]


SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def _sugarcrepe(tmp) -> tuple[str, str]:
  """A SugarCrepe folder of 3 rows per subset on images 0-2 (image 0 used by 2 rows of each) → (data_dir, image_dir)."""
  rows = {"0": "0.png", "1": "1.png", "2": "0.png", "3": "2.png"}
  (tmp / "data" / "sugarcrepe").mkdir(parents=True)
  for s in SUBSETS:
    data = {
        k: {"filename": f, "caption": f"a red cube {k}", "negative_caption": f"a blue ball {k}"}
        for k, f in rows.items()
    }
    (tmp / "data" / "sugarcrepe" / f"{s}.json").write_text(json.dumps(data))
  (tmp / "images").mkdir()
  for k in range(3):
    Image.fromarray(np.random.default_rng(k).integers(0, 256, (30, 40, 3),
                                                      dtype=np.uint8)).save(tmp / "images" / f"{k}.png")
  return str(tmp / "data"), str(tmp / "images")


# --------------------------------------------------------------------------------------------------- evaluate
def test_evaluate_mistakes_are_one_line_and_write_nothing(tmp_path):
  out = tmp_path / "out"
  base = ["--model=m", f"--output={out}", f"--image_dir={tmp_path}"]
  line = _one_line(_run("evaluate", *base, "--benchmark=sugarcrep", f"--data_dir={tmp_path}"))
  assert "unknown benchmark" in line and "did you mean 'sugarcrepe'" in line
  line = _one_line(_run("evaluate", "--model=m", f"--output={out}", f"--data_dir={tmp_path}"))
  assert line == "error: --image_dir is required (see --help)"
  line = _one_line(_run("evaluate", *base, "--benchmark=all", f"--data_dir={tmp_path / 'benchmraks'}"))
  assert "--data_dir" in line and "benchmraks is not a folder" in line
  line = _one_line(_run("evaluate", *base, "--benchmark=all", f"--data_dir={tmp_path}"))  # exists, but empty
  assert "no benchmark files in" in line and "sugarcrepe/swap_obj.json" in line
  assert "value should be one of" in _one_line(_run("evaluate", *base, "--tie=loose"))
  assert not out.exists()


def test_a_model_or_source_that_is_no_checkpoint_is_a_mistake_not_a_bug(tmp_path):
  """A folder the user names that cannot be read as a checkpoint: one line, exit 2 (it was a ValueError: a "bug")."""
  (tmp_path / "notes.txt").write_text("no weights here")
  data_dir, image_dir = _sugarcrepe(tmp_path)
  line = _one_line(
      _run("evaluate", f"--model={tmp_path}", f"--output={tmp_path / 'out'}", f"--data_dir={data_dir}",
           f"--image_dir={image_dir}", "--benchmark=sugarcrepe"))
  assert "not a CLIP checkpoint directory" in line, line
  line = _one_line(_run("convert", f"--src={tmp_path}", "--to=hf", f"--dst={tmp_path / 'dst'}"))
  assert "not a CLIP checkpoint directory" in line, line
  assert not (tmp_path / "dst").exists()


def test_evaluate_skips_and_counts_an_unreadable_image_or_refuses_it_with_strict(tmp_path):
  from flax import nnx
  from compclip_jax.data.images import Preprocess
  from compclip_jax.data.tokenizers import CLIPTokenizer
  from compclip_jax.evaluators import output
  from compclip_jax.evaluators.encoding import Encoder
  from compclip_jax.evaluators.run import run_benchmarks
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  data, images = _sugarcrepe(tmp_path)
  bad = os.path.join(images, "0.png")
  with open(bad, "rb") as f:
    head = f.read(100)
  with open(bad, "wb") as f:  # PIL: "image file is truncated"
    f.write(head)
  enc = Encoder(CLIP(clip_config.tiny(), rngs=nnx.Rngs(0)), CLIPTokenizer.default(), Preprocess(32), batch_size=8,
                progress=False)
  with pytest.raises(UserError, match=f"image {bad}: image file is truncated"):
    run_benchmarks(enc, ["sugarcrepe"], data, images, strict=True)
  res = run_benchmarks(enc, ["sugarcrepe"], data, images)["sugarcrepe"]
  assert res["skipped_images"] == [{"image": bad, "reason": "image file is truncated"}]
  m = res["metrics"]  # the 2 examples of each subset on the bad image are dropped; the counts are what was scored
  assert m["skipped_images"] == 1 and m["skipped_examples"] == 2 * len(SUBSETS)
  assert all(m[f"{s}/count"] == 2 for s in SUBSETS) and all(m[s] in (0.0, 0.5, 1.0) for s in SUBSETS)
  written = output.write(str(tmp_path / "out"), {"sugarcrepe": res}, "tiny", "model", "strict")
  rec = json.load(open([p for p in written if "swap_obj" in p][0]))
  assert rec["skipped_images"] == res["skipped_images"] and rec["metrics"]["skipped_images"] == 1
  assert rec["metrics"]["count"] == 2


def test_strict_refuses_on_every_host_an_image_another_host_could_not_read(tmp_path, monkeypatch):
  """Each host reads only its rows: with --strict the host that owns a bad row must not raise alone (the others
  would wait for it at the next collective). Every host records, agrees (`_agreed`), then raises alike, naming the
  first bad file: here a one-process run where `_agreed` reports row 1 from "another host"."""
  from flax import nnx
  from compclip_jax.data.images import Preprocess
  from compclip_jax.data.tokenizers import CLIPTokenizer
  from compclip_jax.evaluators import encoding
  from compclip_jax.evaluators.tasks import ImageRef
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  _, images = _sugarcrepe(tmp_path)
  refs = [ImageRef(os.path.join(images, f"{k}.png")) for k in range(3)]
  enc = encoding.Encoder(CLIP(clip_config.tiny(), rngs=nnx.Rngs(0)), CLIPTokenizer.default(), Preprocess(32),
                         batch_size=8, progress=False)
  monkeypatch.setattr(encoding, "_agreed", lambda found, n: {**found, 1: "unreadable (found by another host)"})
  with pytest.raises(UserError, match=f"image {refs[1].path}: unreadable \\(found by another host\\)"):
    enc.images(refs, bad={}, strict=True)
  bad = {}
  enc.images(refs, bad=bad)  # without strict: skipped and counted, on every host alike
  assert bad == {1: "unreadable (found by another host)"}


# ---------------------------------------------------------------------------------------------------- convert
def test_convert_mistakes_are_one_line_and_write_nothing(tmp_path):
  dst = tmp_path / "dst"
  line = _one_line(_run("convert", f"--src={tmp_path / 'nothere'}", f"--dst={dst}"))
  assert "nothere does not exist" in line
  line = _one_line(_run("convert", f"--src={tmp_path}", f"--dst={dst}"))  # a folder that is no checkpoint
  assert line.startswith("error: --to is required")
  assert "--dst" in _one_line(_run("convert", f"--src={tmp_path}"))  # absl's "must have a value", as one line
  old = tmp_path / "old_run"  # checkpoints but no run.json: an older version's workdir
  (old / "checkpoints" / "5").mkdir(parents=True)
  for src in (old, old / "checkpoints" / "5"):
    assert "has no run.json" in _one_line(_run("convert", f"--src={src}", f"--dst={dst}"))
  fresh = tmp_path / "fresh_run"  # started, no checkpoint committed yet
  (fresh / "checkpoints").mkdir(parents=True)
  (fresh / "run.json").write_text("{}")
  (fresh / "config.json").write_text(json.dumps({"model": {"init": ""}, "export": {"hf": True, "open_clip": False}}))
  assert "holds no committed checkpoint yet" in _one_line(_run("convert", f"--src={fresh}", f"--dst={dst}"))
  assert not dst.exists()


def export_from_any_checkpoint_is_trainings_export(work, out):
  """Called by tests/train/test_train.py on its CLIC :runlocal run `work` (checkpoints 3 and 6): no training of its
  own. `convert --src=<workdir>` (its latest checkpoint, 6) writes training's own export, file for file; the real
  command `--src=<workdir>/checkpoints/3` the earlier weights (frozen ones the same), which transformers loads."""
  import safetensors.numpy
  import transformers
  from compclip_jax.train import export as export_run
  step, written = export_run.export_run(*export_run.run_source(str(work)), str(out / "latest"))
  trained = sorted(
      os.path.relpath(os.path.join(r, n), work / "export") for r, _, ns in os.walk(work / "export") for n in ns)
  assert step == 6 and sorted(os.path.relpath(p, out / "latest") for p in written) == trained
  for f in trained:
    assert (out / "latest" / f).read_bytes() == (work / "export" / f).read_bytes(), f
  proc = _run("convert", f"--src={work / 'checkpoints' / '3'}", f"--dst={out / 'three'}", "--to=hf")
  assert proc.returncode == 0, proc.stderr[-3000:]
  three = safetensors.numpy.load_file(out / "three" / "hf" / "model.safetensors")
  six = safetensors.numpy.load_file(work / "export" / "hf" / "model.safetensors")
  assert three.keys() == six.keys() and not np.array_equal(three["text_projection.weight"],
                                                           six["text_projection.weight"])
  np.testing.assert_array_equal(three["visual_projection.weight"], six["visual_projection.weight"])  # frozen
  transformers.CLIPModel.from_pretrained(out / "three" / "hf")
  with pytest.raises(UserError, match="not an empty folder"):
    export_run.export_run(str(work), 3, str(out / "three"))


# ---------------------------------------------------------------------------------------------------- prepare
def test_prepare_mistakes_are_one_line_and_write_nothing(tmp_path):
  out = tmp_path / "out"
  (tmp_path / "images").mkdir()
  (tmp_path / "empty.csv").write_text("")
  line = _one_line(
      _run("prepare", f"--csv={tmp_path / 'empty.csv'}", f"--image_root={tmp_path / 'images'}", f"--out={out}"))
  assert "empty.csv: no usable rows (0 read): nothing written" in line
  (tmp_path / "few.csv").write_text("a.jpg,one sentence only\nb.jpg,a red cube,a blue ball\n")  # 1 of 2 rejected
  line = _one_line(
      _run("prepare", f"--csv={tmp_path / 'few.csv'}", f"--image_root={tmp_path / 'images'}", f"--out={out}"))
  assert "1 of 2 rows (50.0%) cannot be used" in line and "--max_skip_fraction" in line and "few.csv:1" in line
  line = _one_line(_run("prepare", f"--csv={tmp_path / 'rows.csv'}", f"--image_root={tmp_path}", f"--out={out}"))
  assert line == f"error: --csv {tmp_path / 'rows.csv'} is not a file"
  few = [f"--csv={tmp_path / 'few.csv'}", f"--image_root={tmp_path / 'images'}", f"--out={out}"]
  line = _one_line(_run("prepare", *few, "--max_skip_fraction=1.5"))
  assert line == "error: --max_skip_fraction 1.5: give a fraction in [0, 1]", line
  assert not out.exists()
  done = _run("prepare", *few, "--max_skip_fraction=1")  # 1 is a fraction, as data.max_skip_fraction=1 is
  assert done.returncode == 0 and "give a fraction" not in done.stderr, done.stderr[-3000:]


def test_prepare_refuses_more_skipped_rows_than_training_accepts(tmp_path):
  """Bad images (found while the shards are written) above the limit: refused, the folder unfinished (training will
  not read it) with every skip listed; a rerun with a raised limit resumes and finishes it."""
  from compclip_jax.data.prepare import PrepareError, prepare
  from compclip_jax.data.records import MAX_SKIP_FRACTION
  from compclip_jax.data.sources import CsvSource, PreparedSource
  from configs import clic
  assert clic.get_config().data.max_skip_fraction == MAX_SKIP_FRACTION  # the limit training uses
  csv, root, bad, _ = df.write_clic_csv(tmp_path / "data", n=12, broken=True)
  csv.write_bytes(b"".join(csv.read_bytes().splitlines(keepends=True)[:-3]))  # without the rows rejected when read
  src = CsvSource(str(csv), str(root))
  out = tmp_path / "out"
  with pytest.raises(PrepareError, match=r"5 of 18 rows \(27.8%\) skipped.*5.0%.*unfinished.*max_skip_fraction=0.278"):
    prepare(src, str(out), image_size=32, progress=False)
  assert not (out / "prepared.json").exists() and len((out / "skipped.jsonl").read_text().splitlines()) == len(bad)
  with pytest.raises(FileNotFoundError, match="no prepared.json"):
    PreparedSource(str(out))
  meta = prepare(src, str(out), image_size=32, progress=False, max_skip_fraction=0.278)
  assert meta["records"] == 13 and len(PreparedSource(str(out))) == 13


def test_one_skip_limit_and_one_skip_summary(monkeypatch):
  """data.max_skip_fraction's default is records.MAX_SKIP_FRACTION itself (no second literal), and prepare words its
  skip counts as training does (records.counts)."""
  from compclip_jax.data import prepare, records
  from compclip_jax.train import config as config_lib
  monkeypatch.setattr(records, "MAX_SKIP_FRACTION", 0.125)
  assert config_lib.base("clic").data.max_skip_fraction == 0.125
  assert prepare.counts is records.counts and records.counts(["b", "a", "b"]) == "b 2, a 1"


def test_help_exits_0():
  for tool in ("evaluate", "convert", "prepare"):
    proc = _run(tool, "--help")
    assert proc.returncode == 0 and f"python -m compclip_jax {tool}" in proc.stdout, (tool, proc.stderr[-2000:])
