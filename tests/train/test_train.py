"""Training end to end on the synthetic world: every config's :runlocal, overfitting, frozen parameters, exact resume
after SIGKILL, signals and their exit codes, a workdir as one run (refusals that leave it untouched), the NaN/Inf guard,
and a two-process jax.distributed run against a one-process run."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import safetensors.numpy

from tests import paths, worlds
from compclip_jax import methods
from compclip_jax.train import state
from compclip_jax.train import checkpointing
from compclip_jax.train import config as config_lib
from compclip_jax.train import runinfo
from compclip_jax.train import loop as train
from configs import clic, clic_read, clip, negclip, read

# Every test here trains (subprocesses or in-process runs of :runlocal): the slow tier (`-m "not slow"` skips them).
pytestmark = pytest.mark.slow

ROOT = paths.ROOT
CONFIGS = {"clic": clic, "read": read, "negclip": negclip, "clip": clip, "clic_read": clic_read}


def _forbid_host_fetches(monkeypatch):
  """`loop.forbid_host_sync` uses jax's transfer guard, which lets every fetch through on CPU (device memory is host
  memory). In these in-process runs the guarded region (a step's dispatch and the next batch's read) also makes
  jax.Array's Python-level fetches raise: float(), int(), bool(), .item(), .tolist(), jax.device_get. (numpy's
  buffer protocol, np.asarray, cannot be intercepted from Python.)"""
  import contextlib
  from jax._src import array
  guard = train._no_fetch

  def fetch(*_, **__):
    raise AssertionError("a device → host fetch between the log / eval / checkpoint points (loop.forbid_host_sync)")

  @contextlib.contextmanager
  def no_fetch(on):
    with guard(on), contextlib.ExitStack() as stack:
      if on:
        patch = pytest.MonkeyPatch()
        stack.callback(patch.undo)
        patch.setattr(array.ArrayImpl, "_value", property(fetch))
        for name in ("item", "tolist"):
          patch.setattr(array.ArrayImpl, name, fetch)
      yield

  monkeypatch.setattr(train, "_no_fetch", no_fetch)


@pytest.fixture(autouse=True)
def _no_host_fetch_between_log_points(monkeypatch):
  _forbid_host_fetches(monkeypatch)


def _shared_run(tmp_path_factory, name, c):
  """A run several tests read (module-scoped fixtures below: trained once per test process), with the same host-fetch
  guard as each test's own runs → (workdir, last metrics)."""
  workdir = tmp_path_factory.mktemp(name)
  with pytest.MonkeyPatch.context() as mp:
    _forbid_host_fetches(mp)
    last = train.run(c, str(workdir))
  return workdir, last


def _metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def _cfg(method, **overrides):
  c = CONFIGS[method].get_config("runlocal")
  c.evals.benchmarks = ()  # evaluation has its own test; the others stay fast
  c.loop.forbid_host_sync = True  # a device → host fetch between the log / checkpoint points fails the test
  for key, value in overrides.items():
    node = c
    *path, leaf = key.split(".")
    for p in path:
      node = node[p]
    node[leaf] = value
  return worlds.use_shared_world(c)


@pytest.fixture(scope="module")
def runlocal(tmp_path_factory):
  """method → (workdir, last metrics) of its `:runlocal` run (evaluation off), trained on first use and shared:
  test_runlocal_trains_and_exports checks it, test_corrupt_latest_checkpoint_falls_back_to_the_previous continues a
  copy of clip's. Tests that change the workdir copy it first."""
  runs = {}

  def get(method):
    if method not in runs:
      runs[method] = _shared_run(tmp_path_factory, f"runlocal_{method}", _cfg(method))
    return runs[method]

  return get


def _runlocal_trained_and_exported(workdir, last):
  assert np.isfinite(last["loss"])
  assert (workdir / "export" / "hf" / "model.safetensors").exists()
  assert (workdir / "checkpoints" / "6").is_dir()
  import transformers
  transformers.CLIPModel.from_pretrained(workdir / "export" / "hf")  # the export loads in transformers


# read: test_evals_run_before_during_and_after_training (its :runlocal run, evaluation on); clic_read: its own test
@pytest.mark.parametrize("method", ["clic", "clip", "negclip"])
def test_runlocal_trains_and_exports(tmp_path, runlocal, method):
  workdir, last = runlocal(method)
  _runlocal_trained_and_exported(workdir, last)
  if method == "clic":
    _frozen_parameters_are_untouched_and_stateless(workdir, _cfg(method))
    from tests.cli.test_user_mistakes_tools import export_from_any_checkpoint_is_trainings_export
    export_from_any_checkpoint_is_trainings_export(workdir, tmp_path / "converted")  # no training of its own


def _frozen_parameters_are_untouched_and_stateless(tmp_path, c):
  """CLIC's vision tower (fp32 in :runlocal) is exported bit for bit as it was loaded and has no saved state."""
  assert c.model.frozen_dtype == "float32"
  model = state.build_model(c, methods.get(c.method))
  exported = safetensors.numpy.load_file(tmp_path / "export" / "hf" / "model.safetensors")
  init = {k: v for k, v in model.flat.items()}
  # the vision tower and its projection are bit-identical to the initial ones; the text side moved
  np.testing.assert_array_equal(exported["vision_model.pre_layrnorm.weight"], init["vision_model.pre_layrnorm.scale"])
  np.testing.assert_array_equal(exported["visual_projection.weight"], init["visual_projection.kernel"])
  assert not np.array_equal(exported["text_projection.weight"], init["text_projection.kernel"])
  # no optimiser state (nor any saved state) exists for frozen parameters
  import orbax.checkpoint as ocp
  saved = ocp.StandardCheckpointer().restore(tmp_path / "checkpoints" / "6" / "default")
  paths = ["/".join(map(str, p)) for p, _ in __import__("jax").tree_util.tree_flatten_with_path(saved)[0]]
  adam = [p for p in paths if "opt_state" in p and ("'mu'" in p or "'nu'" in p)]  # AdamW's moments, one per param
  assert any("text_model" in p for p in adam) and any("text_projection" in p for p in adam), paths
  assert not any("vision_model" in p or "visual_projection" in p for p in paths)


def test_corrupt_latest_checkpoint_falls_back_to_the_previous(tmp_path, caplog, runlocal):
  import shutil
  shutil.copytree(runlocal("clip")[0], tmp_path, dirs_exist_ok=True)  # clip's :runlocal run: checkpoints at 3 and 6
  for root, _, files in os.walk(tmp_path / "checkpoints" / "6" / "default"):
    for name in files:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"garbage")
  caplog.set_level("WARNING")
  train.run(_cfg("clip", **{"total_steps": 8, "log_every": 1}), str(tmp_path), allow_config_change=("total_steps",))
  assert "checkpoint step 6" in caplog.text and "trying the previous one" in caplog.text
  steps_logged = [m["step"] for m in _metrics(tmp_path) if "lr" in m]
  assert steps_logged == [2, 4, 5, 6, 7, 8]  # resumed after step 3; the first run's 4 and 6 moved aside
  aside = os.listdir(tmp_path / "checkpoints_unrestorable")  # the corrupt step 6 is kept, not deleted
  assert len(aside) == 1 and aside[0].startswith("6.") and sorted(
      os.listdir(tmp_path / "checkpoints_unrestorable" / aside[0])) == ["6", "step_6.process_0.json"]


# steps to fall below 0.6 × the first loss, with margin: measured at 20 steps clip 0.03, negclip 0.06, read 0.23; on
# world format 3 (first sentences of 10 words, 3–5 further ones) at 80 steps clic 0.52, clic_read 0.49 (at 40: 0.63;
# the CLIP steps between their CLIC steps learn nothing of the CLIC loss)
OVERFIT_STEPS = {"clip": 20, "negclip": 20, "read": 20, "clic": 80, "clic_read": 80}
# CLIC overfits with its text side but the token embedding: the tiny model's 49408 × 64 table (3.2M of its parameters)
# is a dense gradient all-reduced over the 8 CPU devices and an AdamW update every step, ~45 % of this run's CPU time
# (43.9 → 20.9 s); the loss falls as far without it (0.51 of the first at 80 steps; 0.49 with it). (clic_read: 0.63
# without it, so it keeps it.)
TOKEN_EMBEDDING = r"text_model\.embeddings\.token_embedding\..*"


@pytest.mark.parametrize("method", sorted(CONFIGS))
def test_overfit_a_small_fixed_set(tmp_path, method):
  """8 records, batch 8: every batch holds the same images, so the loss must fall clearly."""
  c = _cfg(
      method, **{
          "data.synthetic_size": 8, "total_steps": OVERFIT_STEPS.get(method, 40), "log_every": 1,
          "checkpoint.every_steps": 100, "optim.lr": 1e-3, "optim.start_lr": 1e-3, "optim.end_lr": 1e-3,
          "optim.warmup_frac": 0.01, "optim.warmup_steps": 1, "optim.schedule": "constant", "optim.weight_decay": 0.0
      })
  if method == "clic":
    c.optim.trainable = (rf"(?!{TOKEN_EMBEDDING}$)text_model\..*", r"text_projection\..*", r"logit_scale")
    c.optim.frozen = tuple(c.optim.frozen) + (TOKEN_EMBEDDING,)
  train.run(c, str(tmp_path))
  key = f"loss/{method}"  # each method's main step kind has the method's name
  losses = [m[key] for m in _metrics(tmp_path) if key in m]
  first, last = np.mean(losses[:3]), np.mean(losses[-3:])
  assert last < 0.6 * first, (method, losses)


def _main(workdir, *extra, method="clic", env=None, shared_world=True, **kw):
  """A `python -m compclip_jax.main` training process on `method`'s :runlocal; its synthetic world the session's
  shared one (tests/worlds.py) unless `shared_world` is False (the run writes its own) or the flags name a source."""
  own = not shared_world or any(f.startswith("--config.data.source=") for f in extra)
  world = () if own else (f"--config.data.path={_cfg(method).data.path}",)
  return subprocess.Popen([
      sys.executable, "-m", "compclip_jax.main", f"--config=configs/{method}.py:runlocal", f"--workdir={workdir}",
      "--config.total_steps=10", "--config.checkpoint.every_steps=2", "--config.log_every=1",
      "--config.evals.benchmarks=()", *world, *extra
  ], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, **kw)


@pytest.fixture(scope="module")
def tfds_data(tmp_path_factory):
  """Offline TFDS datasets (tests/tfds_fixtures.py): coco_captions/2014:1.1.0 and one dense caption per image."""
  from tests import tfds_fixtures as tf_fix
  tmp = tmp_path_factory.mktemp("tfds")
  coco_dir, _, _, paras = tf_fix.write_coco_captions(tmp / "coco", n=40, broken=False)
  return {"coco": coco_dir, "paraphrases": paras, "dense": tf_fix.write_dense_captions(tmp / "dense", n=24)}


def _tfds_overrides(data, dataset):
  """data.* overrides that train on one of `tfds_data`'s datasets."""
  if dataset == "coco":
    return {
        "data.source": "tfds", "data.tfds_data_dir": str(data["coco"]), "data.paraphrases": str(data["paraphrases"]),
        "data.tfds_split": "train+restval"
    }
  return {
      "data.source": "tfds", "data.tfds_data_dir": str(data["dense"]), "data.tfds_name": "dense_captions:1.0.0",
      "data.tfds_captions_key": "caption", "data.tfds_image_key": "jpeg", "data.tfds_id_key": "key",
      "data.tfds_split_sentences": True, "data.tfds_lowercase": True
  }


@pytest.mark.parametrize("method", ["read", "negclip"])
def test_coco_captions_from_tfds_trains_without_tensorflow(tmp_path, tfds_data, method):
  """READ's paper data (COCO Karpathy train + restval here; paraphrases joined by image/id) and NegCLIP from TFDS
  (CLIC from TFDS: the SIGKILL test below). Nothing imports TensorFlow."""
  evals = {  # COCO retrieval from TFDS's split test, in the trainer's evaluations
      "evals.benchmarks": ("coco_retrieval",), "evals.source": "files", "evals.coco_tfds": "coco_captions/2014:1.1.0",
      "evals.tfds_data_dir": str(tfds_data["coco"])
  } if method == "read" else {}
  last = train.run(_cfg(method, total_steps=3, **_tfds_overrides(tfds_data, "coco"), **evals), str(tmp_path))
  assert np.isfinite(last["loss"]) and (tmp_path / "export" / "hf" / "model.safetensors").exists()
  if evals:
    texts = [m["eval/coco_retrieval/texts"] for m in _metrics(tmp_path) if "eval/coco_retrieval/texts" in m]
    assert texts == [40, 40], texts  # before and after training: 8 test images × 5 captions
  assert not [m for m in sys.modules if m.split(".")[0] == "tensorflow"]


@pytest.mark.slow
def test_resume_after_sigkill_is_exact(tmp_path, tfds_data):
  """CLIC from a TFDS dataset of one dense caption per image: killed after its step-4 checkpoint, rerun, it ends
  bit for bit where an uninterrupted run ends."""
  data = _tfds_overrides(tfds_data, "dense")
  # the uninterrupted reference in this process (the same config as _main's flags, the same 8 CPU devices)
  train.run(_cfg("clic", total_steps=10, log_every=1, **{"checkpoint.every_steps": 2}, **data), str(tmp_path / "ref"))
  flags = [f"--config.{k}={v}" for k, v in data.items()]
  run = _main(tmp_path / "run", *flags)
  ckpt = tmp_path / "run" / "checkpoints" / "4"
  deadline = time.time() + 600
  while not ckpt.is_dir() and time.time() < deadline:
    assert run.poll() is None, run.communicate()[0][-3000:]
    time.sleep(0.2)
  _wait_for_step(run, tmp_path / "run" / "metrics.jsonl", 4)  # a line past the checkpoint, to be dropped on resume
  run.send_signal(signal.SIGKILL)
  run.communicate()
  assert not (tmp_path / "run" / "export").exists(), "the run finished before it could be killed"
  again = _main(tmp_path / "run", *flags)
  out, _ = again.communicate(timeout=600)
  assert again.returncode == 0, out
  a = safetensors.numpy.load_file(tmp_path / "ref" / "export" / "hf" / "model.safetensors")
  b = safetensors.numpy.load_file(tmp_path / "run" / "export" / "hf" / "model.safetensors")
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)  # bitwise on CPU
  ref_m = {m["step"]: m for m in _metrics(tmp_path / "ref") if "loss" in m and "lr" in m}
  run_steps = [m["step"] for m in _metrics(tmp_path / "run") if "loss" in m and "lr" in m]
  assert run_steps == list(range(1, 11)), run_steps  # the steps logged after the checkpoint are not repeated
  assert (tmp_path / "run" / "metrics.dropped.jsonl").exists()  # they moved aside
  run_m = {m["step"]: m for m in _metrics(tmp_path / "run") if "loss" in m and "lr" in m}
  for step in range(5, 11):  # after the restart: same data, same losses, same step metrics
    for key in ("loss", "lr", "grad_norm", "param_norm"):
      assert run_m[step][key] == ref_m[step][key], (step, key)


@pytest.mark.slow
def test_signals_checkpoint_and_exit_non_zero_and_a_second_trainer_is_refused(tmp_path):
  """SIGINT (Ctrl-C) → checkpoint, exit 130; SIGTERM → checkpoint, exit 143 (before: exit 0 / nothing saved); a
  second process on the live workdir exits 2 at once; the console holds no library INFO lines."""
  args = ("--config.total_steps=5000", "--config.checkpoint.every_steps=10000")
  run = _main(tmp_path, *args)
  _wait_for_step(run, tmp_path / "metrics.jsonl", 0)
  second = _main(tmp_path, *args)
  out2, _ = second.communicate(timeout=300)
  assert second.returncode == 2 and "is in use: training process" in out2 and "Traceback" not in out2, out2
  assert run.poll() is None
  run.send_signal(signal.SIGINT)
  out, _ = run.communicate(timeout=300)
  assert run.returncode == 130, out
  assert "SIGINT: checkpoint written at step" in out and "rerun the same command to resume" in out
  assert "Traceback" not in out and "checkpoint_manager.py" not in out and "xla_bridge" not in out, out
  step = int(out.split("SIGINT: checkpoint written at step ")[1].split()[0])
  assert [int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()] == [step]
  assert not (tmp_path / runinfo.LOCK_FILE).exists()
  again = _main(tmp_path, *args)
  _wait_for_step(again, tmp_path / "metrics.jsonl", step + 1)
  again.send_signal(signal.SIGTERM)
  out, _ = again.communicate(timeout=300)
  assert again.returncode == 143 and "SIGTERM: checkpoint written" in out, out
  logged = [m["step"] for m in _metrics(tmp_path) if "lr" in m]
  assert logged == sorted(set(logged)) and logged[0] == 1, logged


# CLIC's :runlocal for 4 steps, every step logged, checkpoints at 2 and 4: the one-process, data-parallel, unsignalled
# reference of test_a_signal_during_the_read_ahead_checkpoints_this_step_exactly, test_two_processes_match_one and
# test_fsdp_sharded_optimizer_and_remat_give_the_same_training
CLIC4 = {"total_steps": 4, "log_every": 1, "checkpoint.every_steps": 2}


@pytest.fixture(scope="module")
def clic4(tmp_path_factory):
  return _shared_run(tmp_path_factory, "clic4", _cfg("clic", **CLIC4))[0]


def test_a_signal_during_the_read_ahead_checkpoints_this_step_exactly(tmp_path, monkeypatch, clic4):
  """The loop reads step 3's batch while step 2 runs. A SIGTERM arriving during that read must not leave the
  pipelines one batch ahead in step 2's checkpoint: its data state equals that of a run that checkpoints at step 2
  without a signal (clic4; and a resumed run continues from there exactly, test_resume_after_sigkill_is_exact)."""
  read = train._read

  def read_then_signal(c, t, step):
    out = read(c, t, step)
    if step == 2:  # the read-ahead started after step 2 was dispatched (not a checkpoint step in this run)
      os.kill(os.getpid(), signal.SIGTERM)
    return out

  monkeypatch.setattr(train, "_read", read_then_signal)
  with pytest.raises(train.Interrupted) as e:
    train.run(_cfg("clic", **{**CLIC4, "checkpoint.every_steps": 100}), str(tmp_path / "run"))
  assert e.value.exit_code == 143
  name = "checkpoints/data/step_2.process_0.json"
  assert json.loads((tmp_path / "run" / name).read_text()) == json.loads((clic4 / name).read_text())
  assert not (tmp_path / "run" / "checkpoints" / "3").exists()


def _wait_for_step(run, metrics, after: int):
  deadline = time.time() + 600
  while time.time() < deadline:  # the loop is running past `after`
    assert run.poll() is None, run.communicate()[0][-3000:]
    if metrics.exists() and any(
        json.loads(x).get("step", 0) > after and "lr" in x
        for x in metrics.read_text().splitlines()[-3:] if x.endswith("}")):
      return
    time.sleep(0.2)
  raise TimeoutError(metrics)


@pytest.mark.slow
def test_two_processes_match_one(tmp_path, clic4):
  """jax.distributed on 127.0.0.1: 2 processes × 4 CPU devices train 4 steps like 1 process × 8 devices (clic4; the
  same world, written by this run's process 0 into its workdir)."""
  import portpicker
  port = portpicker.pick_unused_port()
  env = {"XLA_FLAGS": paths.xla_flags(4), "JAX_PLATFORMS": "cpu", "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo"}
  steps = CLIC4["total_steps"]
  procs = [
      _main(tmp_path / "two", f"--config.total_steps={steps}",
            f"--config.checkpoint.every_steps={CLIC4['checkpoint.every_steps']}",
            f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}", env=env,
            shared_world=False)  # process 0 writes the world into the workdir, process 1 waits for it
      for i in range(2)
  ]
  outs = [p.communicate(timeout=600)[0] for p in procs]
  # each process's exit code and the end of its output, where a crash says where it happened
  assert all(p.returncode == 0 for p in procs), "\n\n".join(
      f"process {i} exited {p.returncode}:\n{out[-2500:]}" for i, (p, out) in enumerate(zip(procs, outs)))
  # one process × 8 CPU devices: this one (tests/conftest.py), with the config _main's flags give (clic4)
  assert len(__import__("jax").devices()) == 8
  one_m = [m for m in _metrics(clic4) if "lr" in m]
  two_m = [m for m in _metrics(tmp_path / "two") if "lr" in m]
  assert [m["step"] for m in one_m] == [m["step"] for m in two_m] == list(range(1, steps + 1))
  for x, y in zip(one_m, two_m):  # same global batches → same losses, up to the order of cross-process sums
    np.testing.assert_allclose(y["loss"], x["loss"], rtol=1e-5)
  a = safetensors.numpy.load_file(clic4 / "export" / "hf" / "model.safetensors")
  b = safetensors.numpy.load_file(tmp_path / "two" / "export" / "hf" / "model.safetensors")
  # Adam turns a sign flip of a ~0 gradient into a full-size update, so parameters may differ by up to lr (1e-4) per
  # step; different data would move them far more.
  for k in a:
    np.testing.assert_allclose(a[k], b[k], rtol=0, atol=steps * 1e-4 + 1e-6, err_msg=k)


def test_fsdp_sharded_optimizer_and_remat_give_the_same_training(tmp_path, clic4):
  """data 8 × fsdp 1 (default: clic4) vs data 4 × fsdp 2 with every parameter ≥ 1k elements FSDP-sharded, AdamW's
  moments sharded over all 8 devices (mesh.shard_optimizer) and text-block rematerialisation in one run (any one
  changing the numbers fails it): the same losses."""
  train.run(
      _cfg(
          "clic", **CLIC4, **{
              "mesh.data": 4, "mesh.fsdp": 2, "mesh.min_fsdp_size": 1024, "mesh.shard_optimizer": True,
              "model.remat_text": True
          }), str(tmp_path / "fsdp_remat"))
  ref = _losses(clic4)
  assert len(ref) == 4
  np.testing.assert_allclose(_losses(tmp_path / "fsdp_remat"), ref, rtol=1e-5)


def test_config_errors_are_reported_before_compiling(tmp_path):
  c = _cfg(
      "read", **{
          "model.random": "", "model.init": str(tmp_path / "nope"), "batch_size": 7, "data.source": "coco",
          "read.t5.random": False, "data.path": str(tmp_path / "rows.csv"), "model.frozen_dtype": "fp8"
      })
  with pytest.raises(train.ConfigError) as e:
    train.run(c, str(tmp_path))
  msg = str(e.value)
  for needle in ("model.init", "read needs read.t5.init", "data.path", "data.image_root", "frozen_dtype",
                 "batch_size 7 is not divisible by the 8 devices"):
    assert needle in msg, needle
  assert not (tmp_path / "checkpoints").exists()
  out = subprocess.run([
      sys.executable, "-m", "compclip_jax.main", "--config=configs/clic.py:runlocal", f"--workdir={tmp_path}",
      "--config.model.no_such_key=1"
  ], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
  assert out.returncode != 0 and "no_such_key" in out.stderr


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
  train.run(_cfg("clip", **{"total_steps": 2, "checkpoint.every_steps": 2}), str(tmp_path))
  # a NaN learning rate is how this test makes the parameters NaN; the config check (rightly) refuses one, so it is
  # let through here to reach the guard in the loop
  monkeypatch.setattr(config_lib, "RANGES", tuple(r for r in config_lib.RANGES if r[0] != "optim.lr"))
  bad = _cfg(
      "clip", **{
          "total_steps": 6, "checkpoint.every_steps": 2, "log_every": 1, "optim.lr": float("nan"),
          "optim.schedule": "constant"
      })
  from compclip_jax.train.metrics import NonFiniteLoss
  # step 3's update already made the parameters NaN (its loss was still finite): stopped there, not a step later
  with pytest.raises(NonFiniteLoss, match="param_norm is nan at step 3"):
    train.run(bad, str(tmp_path), allow_config_change=("total_steps", "optim"))
  assert sorted(d for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()) == ["2"]


def test_inf_parameters_with_a_finite_loss_are_not_checkpointed(tmp_path):
  """lr 1e30: step 1's loss is finite (computed before the update) but its parameters are ±1e30, their norm Inf.
  Before, checkpoint 1 held that diverged state."""
  c = _cfg(
      "clip", **{
          "total_steps": 2, "checkpoint.every_steps": 1, "log_every": 100, "optim.lr": 1e30,
          "optim.schedule": "constant"
      })
  from compclip_jax.train.metrics import NonFiniteLoss
  with pytest.raises(NonFiniteLoss, match="param_norm is inf at step 1"):
    train.run(c, str(tmp_path))
  assert not [d for d in os.listdir(tmp_path / "checkpoints") if d.isdigit()]


def _files(root):
  return {os.path.join(r, n): os.stat(os.path.join(r, n)).st_mtime_ns for r, _, fs in os.walk(root) for n in fs}


def test_a_workdir_is_one_run(tmp_path):
  """A rerun with another model shape, another method or another length is refused with the differences and leaves
  every checkpoint, export and metrics line as it was; an allowed change continues; checkpoints that exist but do
  not restore stop the run instead of starting over (before: ~178 lines of orbax, a new run from step 0 that deleted
  the old checkpoints and overwrote the export, exit 0; another method: KeyError)."""
  w = str(tmp_path)
  train.run(_cfg("clip", **{"total_steps": 2, "checkpoint.every_steps": 1}), w)
  assert json.loads((tmp_path / "run.json").read_text())["identity"]["method"] == "clip"
  assert json.loads((tmp_path / "config.json").read_text())["total_steps"] == 2
  before = _files(tmp_path / "checkpoints") | _files(tmp_path / "export")
  metrics = (tmp_path / "metrics.jsonl").read_text()
  with pytest.raises(runinfo.RunMismatch, match=r"(?s)data.image_size: was 32, now 48.*model.params cannot change"):
    train.run(_cfg("clip", **{"total_steps": 2, "data.image_size": 48}), w)
  with pytest.raises(runinfo.RunMismatch, match='method: was "clip", now "negclip"'):
    train.run(_cfg("negclip", **{"total_steps": 2}), w)
  with pytest.raises(runinfo.RunMismatch, match="(?s)total_steps: was 2, now 3.*--allow_config_change=total_steps"):
    train.run(_cfg("clip", **{"total_steps": 3}), w)
  assert _files(tmp_path / "checkpoints") | _files(tmp_path / "export") == before
  assert (tmp_path / "metrics.jsonl").read_text() == metrics
  train.run(_cfg("clip", **{"total_steps": 3, "log_every": 1}), w, allow_config_change=("total_steps",))
  assert [m["step"] for m in _metrics(tmp_path) if "lr" in m] == [2, 3]
  assert json.loads((tmp_path / "run.json").read_text())["changes"][0]["changed"] == {"total_steps": [2, 3]}
  for root, _, files in os.walk(tmp_path / "checkpoints"):  # every checkpoint unreadable
    for name in files:
      if "default" in root:
        with open(os.path.join(root, name), "wb") as f:
          f.write(b"garbage")
  kept = _files(tmp_path / "checkpoints")
  with pytest.raises(checkpointing.Unrestorable, match="holds 3 checkpoint.*none can be restored") as e:
    train.run(_cfg("clip", **{"total_steps": 3}), w)
  assert len(str(e.value).splitlines()) == 1
  assert _files(tmp_path / "checkpoints") == kept
  os.remove(tmp_path /
            "run.json")  # checkpoints without a run record: from before the record (and the [out, in] layout)
  with pytest.raises(runinfo.RunMismatch, match=r"no run.json.*older than commit 25e1078.*cannot be continued"):
    train.run(_cfg("clip", **{"total_steps": 3}), w)
  assert _files(tmp_path / "checkpoints") == kept


def _losses(workdir):
  return [m["loss"] for m in _metrics(workdir) if "lr" in m]


def test_read_initialised_from_hf_clip_and_t5_directories(tmp_path):
  """model.init: an HF CLIP directory; t5.init: an HF T5 v1.1 directory with its spiece.model."""
  import sentencepiece as spm
  import torch
  import transformers
  from tests import hf_fixtures as fx
  fx.random_hf_clip(fx.hf_clip_config()).save_pretrained(tmp_path / "clip")
  t5_dir = tmp_path / "t5"
  corpus = [
      f"a {c} {s} left of a {d} {t}" for c in ("red", "blue", "green") for s in ("square", "circle")
      for d in ("white", "black") for t in ("triangle", "square")
  ]
  t5_dir.mkdir()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(t5_dir / "spiece"), vocab_size=40,
                                 hard_vocab_limit=False, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
  torch.manual_seed(0)
  t5 = transformers.T5ForConditionalGeneration(
      transformers.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=1, num_decoder_layers=2, num_heads=4,
                            feed_forward_proj="gated-gelu", tie_word_embeddings=False))
  t5.lm_head.weight = torch.nn.Parameter(torch.randn(64, 32))
  t5.save_pretrained(t5_dir)
  c = _cfg(
      "read", **{
          "model.random": "", "model.init": str(tmp_path / "clip"), "read.t5.init": str(t5_dir), "total_steps": 2,
          "log_every": 1
      })
  last = train.run(c, str(tmp_path / "work"))
  assert np.isfinite(last["loss"]) and np.isfinite(last["read/rec"])


def test_evals_run_before_during_and_after_training(tmp_path):
  """READ's :runlocal run, evaluated at steps 0, 3 and 6 (and, as every method's in test_runlocal_trains_and_exports,
  trained under the host-fetch guard, checkpointed and exported as transformers loads it)."""
  c = CONFIGS["read"].get_config("runlocal")
  c.evals.every_steps = 3
  c.optim.schedule, c.optim.lr = "constant", 3e-3  # move the weights enough to show in the metrics
  c.loop.forbid_host_sync = True
  last = train.run(worlds.use_shared_world(c), str(tmp_path))
  _runlocal_trained_and_exported(tmp_path, last)
  evals = {m["step"]: m for m in _metrics(tmp_path) if "eval/sugarcrepe/mean" in m}
  assert sorted(evals) == [0, 3, 6]
  for m in evals.values():
    assert 0.0 <= m["eval/sugarcrepe/swap_att"] <= 1.0 and "eval/sugarcrepe_pp/mean/itt" in m
    assert "eval/coco_retrieval/image_retrieval_recall_at_1" in m  # TensorBoard-legal, same name in both logs
  scores = lambda m: {k: v for k, v in m.items() if k.startswith("eval/") and not k.endswith(("count", "seconds"))}
  assert scores(evals[0]) != scores(evals[6])  # the evaluations see the trained weights


def test_clic_read_runlocal_trains_evaluates_and_exports(tmp_path):
  """Ours (configs/clic_read.py): CLIC's alternation with READ's two terms; CLIP and the T5 decoder exported."""
  c = CONFIGS["clic_read"].get_config("runlocal")  # evaluation on: before training and at the end
  c.read.export_decoder = True
  last = train.run(worlds.use_shared_world(c), str(tmp_path))
  assert np.isfinite(last["loss"]) and np.isfinite(last["read/rec"]) and np.isfinite(last["read/align"])
  lines = _metrics(tmp_path)
  assert [m["step"] for m in lines if "eval/sugarcrepe/mean" in m] == [0, 6]
  steps = [m for m in lines if "loss/clic_read" in m]
  assert steps and all("loss/clic_clip" in m and "clic/uni" in m and "read/rec" in m for m in steps)
  assert {m["data/clic_read/seen"] for m in steps} and {m["data/clic_clip/seen"] for m in steps}  # two streams
  import transformers
  transformers.CLIPModel.from_pretrained(tmp_path / "export" / "hf")  # the export loads in transformers
