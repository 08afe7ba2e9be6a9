"""`pip install .` into a fresh virtualenv: the package and its configs install, the pinned set satisfies the declared
dependency ranges (nothing may be fetched), and the CLIs answer --help from outside the checkout."""
import os
import subprocess
import sys
import sysconfig

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_pip_install_into_a_fresh_venv(tmp_path):
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
  py = str(venv / "bin" / "python")
  site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                        text=True, check=True).stdout.strip()
  # the dependencies (pip and the setuptools build backend included) come from this environment through a .pth line,
  # so --no-index proves that the pinned set satisfies pyproject's ranges; the package is built and installed into
  # the new venv
  with open(os.path.join(site, "_deps_from_test_env.pth"), "w") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  proc = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "-q", ROOT],
                        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PIP_NO_CACHE_DIR": "1"})
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  where = subprocess.run([py, "-c", "import compclip_jax, configs.clic; print(compclip_jax.__file__); "
                          "print(configs.clic.get_config('runlocal').method)"], capture_output=True, text=True,
                         cwd=tmp_path, env=env, check=True).stdout.split()
  assert where[0].startswith(site) and where[1] == "clic"  # the installed copy, not the checkout
  for module in ("main", "evaluate", "convert", "prepare", "demo", "bench"):
    out = subprocess.run([py, "-m", f"compclip_jax.{module}", "--help"], capture_output=True, text=True, cwd=tmp_path,
                         env=env)
    text = out.stdout + out.stderr
    # argparse exits 0 after --help, absl 1; either way the flags are listed and nothing failed
    assert out.returncode in (0, 1) and "Traceback" not in text and "--" in text, (module, text[-2000:])
