"""A workdir is one run (compclip_jax/train/runinfo.py): the fingerprint comparison, the lock, the writability check;
and the console rules shared by the entry points (compclip_jax/cli/app.py). Unit tests: no training."""
import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time

import pytest
from flax import nnx

from compclip_jax import compat, methods
from tests import paths
from compclip_jax.cli import app as cli
from compclip_jax.train import runinfo
from configs import clic, read

SHAPES = {
    "text_model.embeddings.token_embedding.embedding": ((49408, 64), "float32"),
    "vision_model.embeddings.position_embedding.embedding": ((17, 64), "float32")
}


def _describe(c, shapes=None, trainable=("text_model.embeddings.token_embedding.embedding",), records=64, total=6):
  return runinfo.describe(c.to_dict(), param_shapes=shapes or SHAPES, trainable=list(trainable), data_records=records,
                          total_steps=total)


def test_identical_configs_have_no_differences_and_neutral_keys_are_ignored():
  a = _describe(clic.get_config("runlocal"))
  c = clic.get_config("runlocal")
  c.log_every, c.evals.benchmarks, c.checkpoint.every_steps, c.data.num_workers = 1, (), 1, 4  # not the run's maths
  assert runinfo.differences(a, _describe(c)) == []
  assert runinfo.check([], (), "w") == []
  assert json.loads(json.dumps(a)) == a  # what run.json stores compares equal to a fresh description


def test_a_changed_learning_rate_and_length_are_refused_with_the_way_out():
  old = _describe(clic.get_config("runlocal"))
  c = clic.get_config("runlocal")
  c.optim.lr = 2e-4
  diffs = runinfo.differences(old, _describe(c, total=8))
  assert diffs == [("optim.lr", 1e-4, 2e-4), ("total_steps", 6, 8)]
  with pytest.raises(runinfo.RunMismatch) as e:
    runinfo.check(diffs, (), "/runs/a")
  msg = str(e.value)
  assert "/runs/a holds another run: 2 difference(s)" in msg
  assert "optim.lr: was 0.0001, now 0.0002" in msg and "total_steps: was 6, now 8" in msg
  assert "new --workdir" in msg and "--allow_config_change=optim.lr,total_steps" in msg
  with pytest.raises(runinfo.RunMismatch, match="--allow_config_change=total_steps$"):
    runinfo.check(diffs, ("optim",), "/runs/a")  # a dotted prefix allows optim.lr; total_steps is still refused
  assert runinfo.check(diffs, ("optim.lr", "total_steps"), "/runs/a") == diffs


def test_another_model_or_method_cannot_be_allowed():
  old = _describe(clic.get_config("runlocal"))
  shapes = {**SHAPES, "vision_model.embeddings.position_embedding.embedding": ((37, 64), "float32")}  # 48 px
  diffs = runinfo.differences(old, _describe(clic.get_config("runlocal"), shapes=shapes))
  assert [k for k, _, _ in diffs] == ["model.params"]
  with pytest.raises(runinfo.RunMismatch, match=r"model.params cannot change within a run"):
    runinfo.check(diffs, ("model.params",), "w")
  diffs = runinfo.differences(old, _describe(read.get_config("runlocal")))
  keys = [k for k, _, _ in diffs]
  assert "method" in keys and "optim.schedule" in keys
  with pytest.raises(runinfo.RunMismatch, match=r"method: was \"clic\", now \"read\"  \[cannot be continued\]"):
    runinfo.check(diffs, tuple(keys), "w")


def test_a_workdir_of_the_old_kernel_layout_cannot_be_continued():
  """Older versions stored dense kernels [in, out] (compat.py); a square one has the shape of an [out, in] kernel,
  so only the recorded layout tells such a checkpoint apart; its run.json (no layout) is refused as another model."""
  new = _describe(clic.get_config("runlocal"))
  old = json.loads(json.dumps(new))
  del old["model.params"]["kernel_layout"]
  diffs = runinfo.differences(old, new)
  assert [k for k, _, _ in diffs] == ["model.params"]
  with pytest.raises(runinfo.RunMismatch, match=r"model.params: .*\[cannot be continued\]") as e:
    runinfo.check(diffs, ("model.params",), "w")
  assert "dense kernels [in, out]" in str(e.value) and "export them with that version" in str(e.value)


def test_the_data_file_is_identified_by_size_and_mtime(tmp_path):
  rows = tmp_path / "rows.csv"
  rows.write_text("image,caption\n")
  c = clic.get_config()
  c.data.path = str(rows)
  before = _describe(c)
  assert before["data.files"]["size"] == 14
  rows.write_text("image,caption\na.png,a cat\n")
  os.utime(rows, (time.time() + 5, time.time() + 5))
  assert [k for k, _, _ in runinfo.differences(before, _describe(c))] == ["data.files"]
  shards = tmp_path / "prepared"
  shards.mkdir()
  (shards / "prepared.json").write_text("{}")
  c.data.path = str(shards)
  one = _describe(c)
  (shards / "shard-00001.npz").write_bytes(b"x")
  assert [k for k, _, _ in runinfo.differences(one, _describe(c))] == ["data.files"]


def test_keys_of_another_version_are_reported_not_refused():
  old = _describe(clic.get_config("runlocal"))
  new = dict(old, **{"data.a_new_switch": True})
  del new["clic.w_uni"]
  assert runinfo.differences(old, new) == []
  assert runinfo.unmatched(old, new) == ["clic.w_uni", "data.a_new_switch"]


def test_record_keeps_the_history_of_accepted_changes(tmp_path):
  ident = _describe(clic.get_config("runlocal"))
  runinfo.record(str(tmp_path), ident, "{}", None, [], 0)
  first = runinfo.load(str(tmp_path))
  assert first["identity"] == ident and first["changes"] == []
  changed = dict(ident, total_steps=8)
  runinfo.record(str(tmp_path), changed, "{}", first, [("total_steps", 6, 8)], 6)
  again = runinfo.load(str(tmp_path))
  assert again["created"] == first["created"] and again["identity"]["total_steps"] == 8
  assert again["changes"][0]["at_step"] == 6 and again["changes"][0]["changed"] == {"total_steps": [6, 8]}
  assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_lock_refuses_a_live_holder_and_takes_over_a_dead_one(tmp_path, caplog):
  path = tmp_path / runinfo.LOCK_FILE
  live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    path.write_text(json.dumps({"pid": live.pid, "host": socket.gethostname(), "started": "then"}))
    with pytest.raises(runinfo.WorkdirBusy, match=rf"training process {live.pid} on {socket.gethostname()}"):
      runinfo.Lock(str(tmp_path)).acquire()
    assert json.loads(path.read_text())["pid"] == live.pid  # the holder's lock is untouched
  finally:
    live.kill()
    live.wait()
  caplog.set_level("WARNING")
  lock = runinfo.Lock(str(tmp_path))
  lock.acquire()  # its process is gone
  assert "no longer running" in caplog.text
  assert json.loads(path.read_text())["pid"] == os.getpid()
  lock.release()
  assert not path.exists()


def test_lock_of_another_host_is_live_until_its_heartbeat_is_stale(tmp_path):
  path = tmp_path / runinfo.LOCK_FILE
  path.write_text(json.dumps({"pid": 1, "host": "worker-7", "started": "then"}))
  with pytest.raises(runinfo.WorkdirBusy, match="worker-7"):
    runinfo.Lock(str(tmp_path)).acquire()
  old = time.time() - runinfo.STALE_S - 60
  os.utime(path, (old, old))
  lock = runinfo.Lock(str(tmp_path))
  lock.acquire()
  lock.release()


def test_an_unwritable_workdir_is_one_clear_error(tmp_path):
  (tmp_path / "file").write_text("")
  with pytest.raises(runinfo.WorkdirError, match=r"workdir .*file/run cannot be written \(Not a directory\)"):
    runinfo.check_writable(str(tmp_path / "file" / "run"))
  runinfo.check_writable(str(tmp_path / "ok"))
  assert os.listdir(tmp_path / "ok") == []  # the probe is removed


# ------------------------------------------------------------------------------------------------------ cli
def test_quiet_logging_keeps_own_lines_and_warnings(tmp_path):
  handler = logging.StreamHandler(open(tmp_path / "log", "w", encoding="utf-8"))  # pylint: disable=consider-using-with
  root = logging.getLogger()
  root.addHandler(handler)
  try:
    cli.quiet_logging(verbose=False)
    logging.getLogger("absl").info("orbax chatter")
    logging.getLogger("jax._src.xla_bridge").info("Unable to initialize backend 'tpu'")
    logging.getLogger("orbax").warning("a library warning")
    own = logging.LogRecord("root", logging.INFO, os.path.join(paths.PKG, "train", "loop.py"), 1, "resumed", None, None)
    root.handle(own)
    handler.flush()
    text = (tmp_path / "log").read_text()
  finally:
    root.removeHandler(handler)
    own_filter = cli._OwnLinesOrWarnings  # pylint: disable=protected-access
    for h in root.handlers:  # leave the test session's handlers as they were
      h.filters = [f for f in h.filters if not isinstance(f, own_filter)]
  assert text.splitlines() == ["a library warning", "resumed"]


def test_guard_prints_user_errors_without_a_traceback(tmp_path, capsys, monkeypatch):
  monkeypatch.delenv("COMPCLIP_TRACEBACK", raising=False)

  def bad(_):
    raise runinfo.RunMismatch("w holds another run")

  with pytest.raises(SystemExit) as e:
    cli.guard(bad)([])
  assert e.value.code == 2 and capsys.readouterr().err == "error: w holds another run\n"

  def read_only(_):
    raise OSError(errno.EROFS, "Read-only file system", "/ro/metrics.jsonl")

  with pytest.raises(SystemExit) as e:
    cli.guard(read_only)([])
  assert e.value.code == 2 and "cannot write /ro/metrics.jsonl: Read-only file system" in capsys.readouterr().err

  def bug(_):
    raise KeyError("clic")

  with pytest.raises(SystemExit) as e:  # a bug keeps its traceback, and says it is one
    cli.guard(bug)([])
  err = capsys.readouterr().err
  assert e.value.code == 1 and "Traceback" in err and "KeyError: 'clic'" in err
  assert err.splitlines()[-1] == cli.BUG
  monkeypatch.setenv("COMPCLIP_TRACEBACK", "1")
  with pytest.raises(runinfo.RunMismatch):
    cli.guard(bad)([])


# ------------------------------------------------------------------------------- older flat config keys carry over
OLD_KEYS = {  # today's key → the flat key of the versions before the method sections (compat.RENAMED_KEYS)
    "clic.clip_every": "clip_every", "clic.w_cont": "loss.w_cont", "clic.w_sneg": "loss.w_sneg",
    "clic.w_uni": "loss.w_uni", "clic.concat": "data.clic_concat",
    "clic.imagenet_normalization": "data.clic_imagenet_normalization",
    "clic.shared_words_across_tags": "data.clic_shared_words_across_tags",
    "clic.exclude_nonword": "data.clic_exclude_nonword", "read.w_rec": "loss.w_rec", "read.t5.init": "t5.init",
    "read.t5.init_files": "t5.init_files", "read.proj_init": "model.read_proj_init",
    "read.export_decoder": "export.t5_decoder", "read.overlapping_swaps": "data.read_overlapping_swaps"
}


@pytest.mark.parametrize("name", ["clic", "clic_read"])
def test_a_run_recorded_under_the_older_flat_keys_is_the_same_run(name):
  """A run.json of the older layout (flat keys written by hand here, and the schedule's older name) reads as today's
  identity: no difference, nothing unmatched — so an old workdir resumes. Other methods' keys that older configs
  carried (READ's loss weights in a CLIC run) are dropped, not reported."""
  from configs import clic_read  # pylint: disable=import-outside-toplevel
  c = (clic if name == "clic" else clic_read).get_config("runlocal")
  today = _describe(c)
  old = {OLD_KEYS.get(k, k): v for k, v in today.items()}
  old["optim.schedule"] = "clic"  # CLIC's recipe's schedule, under its older name
  if name == "clic":
    old.update({"loss.w_rec": 0.1, "t5.random": False, "data.negclip_random_caption": False})  # not CLIC's
  assert set(old) != set(today)
  migrated, moved = compat.migrate_flat(old, set(today))
  assert ("loss.w_uni", "clic.w_uni") in moved and ("clip_every", "clic.clip_every") in moved
  assert migrated == today
  assert runinfo.differences(migrated, today) == [] and runinfo.unmatched(migrated, today) == []


def test_older_command_line_keys_are_read_as_todays(caplog):
  argv = [
      "x", "--config=configs/read.py", "--config.t5.init=/t5", "--config.loss.w_rec=0.2",
      "--config.optim.schedule=read", "--allow_config_change=loss.w_rec,total_steps", "--config.optim.lr=1"
  ]
  with caplog.at_level("WARNING"):
    out = compat.migrate_argv(argv)
  assert out == [
      "x", "--config=configs/read.py", "--config.read.t5.init=/t5", "--config.read.w_rec=0.2",
      "--config.optim.schedule=warmup_steps_cosine", "--allow_config_change=read.w_rec,total_steps",
      "--config.optim.lr=1"
  ]
  lines = [r.getMessage() for r in caplog.records if "older config keys" in r.getMessage()]
  assert len(lines) == 1 and "t5.init → read.t5.init" in lines[0]


@pytest.mark.parametrize("name", ["clic", "read"])
def test_a_workdir_written_before_the_method_sections_resumes(name):
  """The run identity the code before the method sections wrote (tests/fixtures/old_layout, recorded by 269ffbb's
  `python -m compclip_jax.main --config=configs/<name>.py:runlocal --config.total_steps=1`) read by today's code
  equals today's identity of the same run — config values, parameter shapes, trainable set — with nothing
  unmatched: such a workdir resumes."""
  from compclip_jax.train import state  # pylint: disable=import-outside-toplevel
  with open(os.path.join(paths.FIXTURES, "old_layout", f"{name}_runlocal_identity.json")) as f:
    old = json.load(f)["identity"]
  c = (clic if name == "clic" else read).get_config("runlocal")
  c.total_steps = 1
  method = methods.get(name)
  model = state.build_model(c, method)
  _, trainable, _, _ = state.split_parameters(c, model)
  today = runinfo.describe(c.to_dict(), param_shapes=state.initial_flat(model),
                           trainable=[".".join(map(str, p)) for p, _ in nnx.to_flat_state(trainable)],
                           data_records=old["data.records"], total_steps=1,
                           neutral=tuple(k for s in method.sections for k in s.neutral))
  assert runinfo.differences(old, today) or runinfo.unmatched(old, today)  # the layouts differ as written
  migrated = compat.read_recorded_identity(old, today, "run.json")  # as train/loop.py `_previous_identity` reads it
  assert runinfo.differences(migrated, today) == [] and runinfo.unmatched(migrated, today) == []
