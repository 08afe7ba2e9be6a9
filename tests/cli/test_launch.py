"""Launch scripts: syntax, --help, and the exact commands of --dry-run (quoting of config overrides included)."""
import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests import paths

ROOT = paths.ROOT
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
  out = subprocess.run([
      script, "--num_processes=3", "--port=4000", "--gpus", "--dry-run", "--", "--config=configs/clic.py",
      "--workdir=runs/my run", "--config.optim.lr=2e-6", "--config.evals.benchmarks=('sugarcrepe', 'valse')"
  ], capture_output=True, text=True, check=True).stdout.splitlines()
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
    assert args[:4] == [
        "--config=configs/clic.py", "--workdir=runs/my run", "--config.optim.lr=2e-6",
        "--config.evals.benchmarks=('sugarcrepe', 'valse')"
    ]


def test_local_multiprocess_refuses_missing_workdir():
  script = os.path.join(ROOT, "launch", "local_multiprocess.sh")
  out = subprocess.run([script, "--dry-run", "--", "--config=configs/clic.py"], capture_output=True, text=True)
  assert out.returncode == 2 and "--workdir" in out.stderr


TPU = os.path.join(ROOT, "launch", "tpu_vm.sh")


def _argv(line: str) -> list[str]:
  """The argument vector bash builds from a printed (shell-quoted) command line."""
  out = subprocess.run(["bash", "-c", 'eval "a=($1)"; printf "%s\\0" "${a[@]}"', "_", line], capture_output=True,
                       text=True, check=True).stdout
  return out.split("\0")[:-1]


def _tpu(*args, **env):
  e = {**os.environ, "TPU_ZONE": "us-central2-b", "TPU_NAME": "clic pod", **env}
  return subprocess.run([TPU, *args[:1], "--dry-run", *args[1:]], capture_output=True, text=True, env=e)


def test_tpu_create_and_delete_commands():
  out = _tpu("create", "--accelerator=v4-32", "--spot", "--project=my-proj")
  assert out.returncode == 0, out.stderr
  assert _argv(out.stdout.strip()) == [
      "gcloud", "compute", "tpus", "tpu-vm", "create", "clic pod", "--zone=us-central2-b", "--project=my-proj",
      "--accelerator-type=v4-32", "--version=tpu-ubuntu2204-base", "--spot"
  ]
  out = _tpu("create", TPU_CAPACITY="preemptible", TPU_VERSION="v2-alpha-tpuv5-lite", TPU_ACCELERATOR="v5litepod-8")
  assert _argv(
      out.stdout.strip())[-3:] == ["--accelerator-type=v5litepod-8", "--version=v2-alpha-tpuv5-lite", "--preemptible"]
  assert _argv(_tpu("delete").stdout.strip())[4:] == ["delete", "clic pod", "--zone=us-central2-b", "--quiet"]


def test_tpu_run_fans_out_with_one_log_per_worker_and_exact_arguments(tmp_path):
  flags = [
      "--config=configs/clic.py", "--workdir=/gcs/b/my run", "--config.optim.lr=2e-6",
      "--config.evals.benchmarks=('sugarcrepe', 'valse')"
  ]
  out = _tpu("run", "--run_name=exp 1", "--", *flags)
  assert out.returncode == 0, out.stderr
  check, start = out.stdout.strip().split("\n", 1)
  # first, on worker 0 (its checkout and paths): the compile check for the accelerator (v4-8 by default), the config
  # flags only, handed to python exactly
  check = _argv(check)
  assert check[:8] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "clic pod", "--zone=us-central2-b", "--worker=0"]
  remote_check = check[8].removeprefix("--command=")
  assert remote_check.startswith("cd compclip_jax && . .venv/bin/activate && python -m compclip_jax compile ")
  assert _argv(remote_check.split(" && ")[-1]) == [
      "python", "-m", "compclip_jax", "compile", "--topology=v4-8", "--require_fit", "--config=configs/clic.py",
      "--config.optim.lr=2e-6", "--config.evals.benchmarks=('sugarcrepe', 'valse')"
  ]
  argv = _argv(start)
  assert argv[:8] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "clic pod", "--zone=us-central2-b", "--worker=all"]
  remote = argv[8].removeprefix("--command=")
  launch = next(l for l in remote.splitlines() if "compclip_jax.main" in l)
  assert launch.startswith("setsid nohup python -m compclip_jax.main --distributed ")
  assert launch.endswith(" >> logs/exp\\ 1/worker-$(hostname).log 2>&1 < /dev/null &")  # appended, not truncated
  # the worker's shell hands python exactly the flags given here
  args = launch.removeprefix("setsid nohup python -m compclip_jax.main").split(" >> ")[0]
  got = subprocess.run(["bash", "-c", f"printf '%s\\n' {args}"], capture_output=True, text=True,
                       check=True).stdout.splitlines()
  assert got == ["--distributed", *flags]
  # and the whole remote script is valid bash that starts the job detached and records its pid
  (tmp_path / "remote.sh").write_text(remote)
  subprocess.run(["bash", "-n", str(tmp_path / "remote.sh")], check=True)
  assert "echo $! > logs/exp\\ 1/worker-$(hostname).pid" in remote


def test_tpu_check_maps_the_accelerator_and_run_can_skip_it():
  out = _tpu("check", "--", "--config=configs/read.py", "--workdir=w", TPU_ACCELERATOR="v5litepod-16", TPU_ZONE="")
  assert out.returncode == 0 and _argv(out.stdout.strip()) == [
      "python", "-m", "compclip_jax", "compile", "--topology=v5e-16", "--require_fit", "--config=configs/read.py"
  ], out.stderr
  out = _tpu("run", "--no_check", "--", "--config=configs/clic.py", "--workdir=w")
  assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 1 and "compclip_jax compile" not in out.stdout


def test_tpu_run_does_not_start_when_the_check_fails(tmp_path):
  """A check that fails on worker 0 (here a `gcloud` whose ssh exits 1) stops `run` before the training command."""
  fake = tmp_path / "bin"
  fake.mkdir()
  (fake / "gcloud").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\nexit 1\n")
  (fake / "gcloud").chmod(0o755)
  env = {**os.environ, "TPU_ZONE": "z", "PATH": f"{fake}:{os.environ['PATH']}"}
  out = subprocess.run([TPU, "run", "--", "--config=configs/clic.py", "--workdir=w"], capture_output=True, text=True,
                       env=env)
  assert out.returncode == 1 and "not started" in out.stderr
  calls = (tmp_path / "calls").read_text().splitlines()
  assert len(calls) == 1 and "--worker=0" in calls[0] and "compclip_jax compile" in calls[0], calls


def test_tpu_sync_setup_tail_stop():
  sync = _tpu("sync").stdout.strip().splitlines()
  assert "git ls-files -z | tar --null -T - -czf" in sync[0]
  assert _argv(sync[1])[4:] == [
      "scp", _argv(sync[1])[5], "clic pod:compclip_jax_sync.tar.gz", "--zone=us-central2-b", "--worker=all"
  ]
  assert _argv(sync[2])[-1] == "--command=mkdir -p compclip_jax && tar -xzf compclip_jax_sync.tar.gz -C compclip_jax"
  setup = _argv(_tpu("setup", "--python=python3.12").stdout.strip())[-1]
  assert "python3.12 -m venv .venv" in setup and "pip install -q -r requirements.txt" in setup
  assert "'jax[tpu]==0.10.2'" in setup
  tail = _argv(_tpu("tail", "--worker=3", "--follow").stdout.strip())
  assert "--worker=3" in tail and tail[-1] == "--command=tail -n 50 -F compclip_jax/logs/run/worker-$(hostname).log"
  stop = _argv(_tpu("stop").stdout.strip())
  assert "--worker=all" in stop and "pkill -TERM -f '[c]ompclip_jax.main'" in stop[-1]
  mount = _argv(_tpu("mount", "--bucket=my-bucket").stdout.strip())[-1]
  assert "gcsfuse --implicit-dirs my-bucket /gcs/my-bucket" in mount


def test_tpu_refuses_bad_input():
  assert _tpu("run", TPU_ZONE="").returncode == 2  # no zone
  assert "--" in _tpu("run").stderr  # no training flags
  assert _tpu("launch").returncode == 2
  assert _tpu("tail", "--follow").returncode == 2  # following needs one worker
  assert _tpu("mount").returncode == 2


def test_tpu_stop_signals_training_but_not_itself():
  """The remote `stop` command, run here: it SIGTERMs a process that looks like training and survives its own
  pkill -f (its command text contains the pattern too)."""
  remote = _argv(_tpu("stop").stdout.strip())[-1].removeprefix("--command=")
  if subprocess.run(["pgrep", "-f", "[c]ompclip_jax.main"], capture_output=True).returncode == 0:
    pytest.skip("a real compclip_jax.main runs on this machine; the stop command would signal it too")
  fake = subprocess.Popen(["bash", "-c", 'exec -a "python -m compclip_jax.main --config=x" sleep 60'])
  try:
    # The fake's command line is readable only once its exec has finished; signalling earlier finds nothing.
    for _ in range(100):
      if (Path(f"/proc/{fake.pid}/cmdline").read_bytes().startswith(b"python -m compclip_jax.main")):
        break
      time.sleep(0.05)
    out = subprocess.run(["bash", "-c", remote], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "SIGTERM sent on" in out.stdout, out
    assert fake.wait(timeout=10) == -15
  finally:
    fake.kill()


def _fake_bin(tmp_path, name: str, body: str) -> dict:
  """PATH with a fake `name` executable first (a script with `body`)."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
  (bin_dir / name).chmod(0o755)
  return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_tpu_dry_run_anywhere_before_the_double_dash(tmp_path):
  env = {**os.environ, "TPU_ZONE": "us-central2-b", **_fake_bin(tmp_path, "gcloud", f"touch {tmp_path}/called\n")}
  for argv in (["--dry-run", "create"], ["--zone=us-central2-b", "--dry-run", "create",
                                         "--spot"], ["create", "--dry-run"]):
    out = subprocess.run([TPU, *argv], capture_output=True, text=True, env=env)
    assert out.returncode == 0, (argv, out.stderr)
    assert _argv(out.stdout.strip())[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "compclip"], argv
  assert not (tmp_path / "called").exists()
  out = subprocess.run([TPU, "--dry-run", "create", "delete"], capture_output=True, text=True, env=env)
  assert out.returncode == 2 and "unexpected argument: delete" in out.stderr


def test_tpu_dry_run_after_the_double_dash_runs_nothing_and_is_not_forwarded(tmp_path):
  """Before: `run -- … --dry-run` really called gcloud, with --dry-run handed to the training command."""
  env = {**os.environ, "TPU_ZONE": "us-central2-b", **_fake_bin(tmp_path, "gcloud", f"touch {tmp_path}/called\n")}
  out = subprocess.run([TPU, "run", "--", "--config=configs/clic.py", "--workdir=w", "--dry-run"], capture_output=True,
                       text=True, env=env)
  assert out.returncode == 0, out.stderr
  assert not (tmp_path / "called").exists(), "gcloud was called"
  remote = _argv(out.stdout.strip())[-1]
  assert "--workdir=w" in remote and "--dry-run" not in remote
  assert "taken as this script's --dry-run" in out.stderr


def test_tpu_run_appends_logs_and_refuses_a_second_live_launch(tmp_path):
  """The remote `run` script, executed here with a stand-in python: a second launch while the first lives is
  refused (exit 1), and a launch after it ended appends to the same log."""
  remote_dir = tmp_path / "checkout"
  (remote_dir / ".venv" / "bin").mkdir(parents=True)
  (remote_dir / ".venv" / "bin" / "activate").write_text("")
  env = {**os.environ, **_fake_bin(tmp_path, "python", 'echo "training $*"; exec sleep "${SLEEP:-60}"\n')}
  remote = _argv(_tpu("run", f"--remote_dir={remote_dir}", "--", "--workdir=w").stdout.strip())[-1]
  remote = remote.removeprefix("--command=")
  first = subprocess.run(["bash", "-c", remote], capture_output=True, text=True, env=env, timeout=30)
  assert first.returncode == 0 and "started on" in first.stdout, first
  pid_file = next((remote_dir / "logs" / "run").glob("*.pid"))
  pid = int(pid_file.read_text())
  try:
    second = subprocess.run(["bash", "-c", remote], capture_output=True, text=True, env=env, timeout=30)
    assert second.returncode == 1 and "already running" in second.stderr, second
    assert int(pid_file.read_text()) == pid  # the live job's pid file is untouched
  finally:
    os.kill(pid, 9)
  for _ in range(100):  # wait until the killed job is gone
    if subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0:
      break
    __import__("time").sleep(0.1)
  third = subprocess.run(["bash", "-c", remote], capture_output=True, text=True, env={**env, "SLEEP": "0"}, timeout=30)
  assert third.returncode == 0, third
  __import__("time").sleep(0.5)
  text = next((remote_dir / "logs" / "run").glob("*.log")).read_text()
  assert text.count("==== start") == 2, text
  assert text.count("training -m compclip_jax.main --distributed --workdir=w") == 2, text
