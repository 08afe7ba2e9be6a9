"""The commands' contract with a user: a mistake is one line on stderr (what is wrong, which file / key,
what to do), exit 2, no traceback and nothing written — the workdir is not even created; `--help` exits 0; a bug
keeps its traceback and says it is one; a signal stop exits 128 + its number with one line. Each command runs for real
in a subprocess and is refused before any model is built (a few seconds each)."""
import os
import signal
import subprocess
import sys

import pytest

from compclip_jax.cli import app as cli
from compclip_jax.demo import tables
from tests import paths

ENV = {**os.environ, "PYTHONPATH": paths.ROOT}


def _run(command: str, *args: str, cwd: str = paths.ROOT) -> subprocess.CompletedProcess:
  """`python -m compclip_jax.main` / `.demo` (their own modules), else `python -m compclip_jax COMMAND`."""
  module = [f"compclip_jax.{command}"] if command in ("main", "demo") else ["compclip_jax", command]
  return subprocess.run([sys.executable, "-m", *module, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                        timeout=300)


def _one_line_refusal(out: subprocess.CompletedProcess, says: str, workdir) -> None:
  """Exit 2, stderr a single `error: …` line holding `says`, and `workdir` never created."""
  err = out.stderr.strip()
  assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
  assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
  assert says in err, err
  assert not workdir.exists(), sorted(os.listdir(workdir))


MAIN_MISTAKES = {  # case → (arguments after --workdir, what the one line says)
    "config file that does not exist": (["--config=configs/clik.py:runlocal"],
                                        "configs/clik.py does not exist; the configs in configs are clic.py"),
    "mistyped key": (["--config=configs/clic.py:runlocal", "--config.optim.lrr=1e-4"],
                     "--config.optim.lrr: no such config key: did you mean optim.lr?"),
    "unknown config argument": (["--config=configs/clic.py:runloca"], "unknown argument 'runloca'"),
    "not a checkpoint": (["--config=clic:runlocal", "--config.model.init={fixtures}"],
                         "not a CLIP checkpoint directory"),
    "NaN learning rate": (["--config=clic:runlocal", "--config.optim.lr=nan"],
                          "config problem: optim.lr nan: must be > 0"),
    "negative loss weight": (["--config=read:runlocal", "--config.read.w_rec=-0.1"], "read.w_rec -0.1: must be ≥ 0"),
    "value of the wrong type": (["--config=clic:runlocal", "--config.optim.lr=fast"], "optim.lr=fast"),
    "mistyped benchmark": (["--config=clic:runlocal", "--config.evals.benchmarks=('sugarcrep',)"],
                           "config problem: evals.benchmarks: unknown benchmark(s) ['sugarcrep'] ('sugarcrep': did "
                           "you mean 'sugarcrepe'?)"),
    "unknown tie rule": (["--config=clic:runlocal", "--config.evals.tie=loose"],
                         "config problem: evals.tie 'loose': use one of ('strict', 'lenient')"),
    "stray argument": (["--config=clic:runlocal", "train"], "unexpected arguments: ['train']"),
    "TFDS dataset not in its data_dir": (["--config=read:runlocal", "--config.data.source=tfds",
                                          "--config.data.tfds_data_dir={fixtures}"],
                                         "TFDS dataset coco_captions/2014:1.1.0: no {fixtures}/coco_captions/2014/"
                                         "1.1.0/dataset_info.json; {fixtures}/coco_captions/2014 does not exist"),
    "unknown flag": (["--config=clic:runlocal", "--workdirr=x"], "Unknown command line flag 'workdirr'"),
}


@pytest.mark.parametrize("case", list(MAIN_MISTAKES))
def test_training_mistakes_are_one_line(case, tmp_path):
  args, says = MAIN_MISTAKES[case]
  args = [a.format(fixtures=paths.FIXTURES) for a in args]
  says = says.format(fixtures=paths.FIXTURES)
  _one_line_refusal(_run("main", f"--workdir={tmp_path / 'w'}", *args), says, tmp_path / "w")


@pytest.mark.parametrize("text, says", [
    ("def get_config(arg=None:\n  pass\n", "failed to load: SyntaxError: invalid syntax (bad.py, line 1)"),
    ("def get_config(arg=None):\n  return {'a': 1}['b']\n", "failed to load: KeyError: 'b'"),
])
def test_a_config_file_that_fails_to_load_is_one_line(text, says, tmp_path):
  (tmp_path / "bad.py").write_text(text)
  out = _run("main", f"--config={tmp_path / 'bad.py'}", f"--workdir={tmp_path / 'w'}")
  _one_line_refusal(out, f"--config={tmp_path / 'bad.py'}: {tmp_path / 'bad.py'} {says}", tmp_path / "w")


def test_a_training_workdir_as_model_init_says_what_to_pass(tmp_path):
  run = tmp_path / "run"  # a workdir: its config.json alone would look like an HF model's
  run.mkdir()
  (run / "run.json").write_text("{}")
  (run / "config.json").write_text("{}")
  out = _run("main", "--config=clic:runlocal", f"--workdir={tmp_path / 'w'}", f"--config.model.init={run}")
  _one_line_refusal(
      out, f"model.init {run} is a training workdir, not a checkpoint: pass {run / 'export' / 'hf'} "
      f"(its export) or write one with python -m compclip_jax convert --src={run}", tmp_path / "w")


def test_values_that_make_no_sense_are_refused_all_at_once(tmp_path):
  out = _run("main", "--config=clic:runlocal", f"--workdir={tmp_path / 'w'}", "--config.optim.lr=-1",
             "--config.batch_size=0", "--config.clic.w_uni=-1", "--config.data.max_skip_fraction=2",
             "--config.optim.warmup_frac=1.5", "--config.mesh.fsdp=3")
  assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
  lines = out.stderr.strip().splitlines()
  assert lines[0] == "error: 6 config problems:", lines
  for says in ("optim.lr -1.0: must be > 0", "batch_size 0: must be > 0", "clic.w_uni -1.0: must be ≥ 0",
               "data.max_skip_fraction 2.0: must be in [0, 1]", "optim.warmup_frac 1.5: must be in [0, 1]",
               "mesh.data -1 × mesh.fsdp 3 does not use the "):  # the device count is the machine's
    assert sum(says in line for line in lines[1:]) == 1, (says, lines)
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("args, says", [
    (["--method=clic", "--config.optim.lrr=1e-4"], "did you mean optim.lr?"),
    (["--method=clic", "--config.clic.w_sneg=-1"], "config problem: clic.w_sneg -1.0: must be ≥ 0"),
    (["--method=read", "--config.optim.lr=fast"], "optim.lr takes a float"),
    (["--method=clic", "--pretrain_batch=0", "--bag_noise=2", "--collage_negatives=-1"
     ], "--pretrain_batch=0: must be > 0; --bag_noise=2.0: a probability, in [0, 1]; --collage_negatives=-1.0: a loss "
     "weight, ≥ 0"),
])
def test_demo_mistakes_are_one_line(args, says, tmp_path):
  # clic and read run their control first: a mistake in the method's values is refused before it, not after
  _one_line_refusal(_run("demo", f"--workdir={tmp_path / 'w'}", *args), says, tmp_path / "w")


def test_the_demo_without_a_control_refuses_a_mistake_before_any_stage(tmp_path):
  out = _run("demo", f"--workdir={tmp_path / 'w'}", "--method=negclip", "--no_control", "--config.optim.lr=-1")
  _one_line_refusal(out, "config problem: optim.lr -1.0: must be > 0", tmp_path / "w")
  assert "demo:" not in out.stdout, out.stdout  # no stage line announced what did not happen


@pytest.mark.parametrize("module", ["main", "demo", "bench", "bench_device", "synthetic", "compile"])
def test_help_exits_0(module):
  out = _run(module, "--help")
  assert out.returncode == 0 and "--" in out.stdout and "Traceback" not in out.stderr, out.stderr[-2000:]


BUGGY = """
from compclip_jax.cli import app as cli
def main(argv):
  {}
cli.run(main)
"""


@pytest.mark.parametrize("body, code, says", [
    ("raise KeyError('clic')", cli.EXIT_BUG, cli.BUG),
    ("from compclip_jax.train import loop; raise loop.Interrupted(2, 5, 'w')", cli.EXIT_SIGINT,
     "SIGINT: checkpoint written at step 5 in w; rerun the same command to resume"),
])
def test_a_bug_keeps_its_traceback_and_a_stop_is_one_line(body, code, says):
  env = {k: v for k, v in ENV.items() if k != "COMPCLIP_TRACEBACK"}  # that one lets every traceback through
  out = subprocess.run([sys.executable, "-c", BUGGY.format(body)], env=env, capture_output=True, text=True, timeout=300,
                       cwd=paths.ROOT)
  lines = out.stderr.strip().splitlines()
  assert out.returncode == code and lines[-1] == says, out.stderr[-3000:]
  if code == cli.EXIT_BUG:
    assert lines[0].startswith("Traceback") and "KeyError: 'clic'" in out.stderr
  else:
    assert len(lines) == 1 and code == 128 + signal.SIGINT


def test_the_report_shows_the_method_beside_its_control():
  table = {"SugarCrepe swap (mean)": (0.60, 0.70), "retrieval text R@1": (0.80, 0.85)}
  control = {"SugarCrepe swap (mean)": (0.60, 0.65), "retrieval text R@1": (0.80, 0.90)}
  text = tables.report_table("clic", table, "clip", control).splitlines()
  assert text[0].endswith("| before | clic | Δ | clip (control) | Δ | clic − clip |")
  assert text[2] == "| SugarCrepe swap (mean) | 60.0 | 70.0 | +10.0 | 65.0 | +5.0 | +5.0 |"
  assert text[3] == "| retrieval text R@1 | 80.0 | 85.0 | +5.0 | 90.0 | +10.0 | -5.0 |"
  alone = tables.report_table("clic", table).splitlines()
  assert alone[0].endswith("| before | after | Δ |") and alone[2] == "| SugarCrepe swap (mean) | 60.0 | 70.0 | +10.0 |"
