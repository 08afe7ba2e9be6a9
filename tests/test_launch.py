"""Launch scripts: syntax, --help, and the exact commands of --dry-run (quoting of config overrides included)."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "launch", "*.sh")))


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_syntax_and_help(script):
  subprocess.run(["bash", "-n", script], check=True)
  out = subprocess.run([script, "--help"], capture_output=True, text=True, check=True).stdout
  assert "usage:" in out and "--dry-run" in out
  if shutil.which("shellcheck"):
    subprocess.run(["shellcheck", script], check=True)


def test_local_multiprocess_dry_run():
  script = os.path.join(ROOT, "launch", "local_multiprocess.sh")
  out = subprocess.run([script, "--num_processes=3", "--port=4000", "--gpus", "--dry-run", "--",
                        "--config=configs/clic.py", "--workdir=runs/my run", "--config.optim.lr=2e-6",
                        "--config.evals.benchmarks=('sugarcrepe', 'valse')"],
                       capture_output=True, text=True, check=True).stdout.splitlines()
  assert out[0] == "mkdir -p runs/my\\ run/logs" and out[-1] == "wait"
  procs = out[1:-1]
  assert len(procs) == 3
  for i, line in enumerate(procs):
    assert line.startswith(f"CUDA_VISIBLE_DEVICES={i} python -m compclip_jax.main --config=configs/clic.py")
    assert f"--coordinator_address=127.0.0.1:4000 --num_processes=3 --process_id={i}" in line
    assert f"> runs/my\\ run/logs/process_{i}.log 2>&1 &" in line
    # what the shell hands to python: exactly the arguments given, spaces and quotes intact
    echo = line.replace(f"CUDA_VISIBLE_DEVICES={i} python -m compclip_jax.main", "printf '%s\\n'")
    echo = echo.split(" > ")[0]
    args = subprocess.run(["bash", "-c", echo], capture_output=True, text=True, check=True).stdout.splitlines()
    assert args[:4] == ["--config=configs/clic.py", "--workdir=runs/my run", "--config.optim.lr=2e-6",
                        "--config.evals.benchmarks=('sugarcrepe', 'valse')"]


def test_local_multiprocess_refuses_missing_workdir():
  script = os.path.join(ROOT, "launch", "local_multiprocess.sh")
  out = subprocess.run([script, "--dry-run", "--", "--config=configs/clic.py"], capture_output=True, text=True)
  assert out.returncode == 2 and "--workdir" in out.stderr
