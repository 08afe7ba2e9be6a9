"""`pip install .` into a fresh virtualenv: the package and its configs install, the pinned set satisfies the declared
dependency ranges (nothing may be fetched), and the CLIs answer --help from outside the checkout."""
import os
import subprocess
import sys
import sysconfig

import pytest

from tests import paths

ROOT = paths.ROOT


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
  # no generic top-level `configs` is installed; the configs ship inside the package and load by name
  probe = ("import importlib.util, sys, compclip_jax\n"
           "from compclip_jax import recipes as config_files\n"
           "from compclip_jax.cli import config_args\n"
           "assert importlib.util.find_spec('configs') is None, importlib.util.find_spec('configs')\n"
           "from absl import flags\n"
           "from ml_collections import config_flags\n"
           "config_flags.DEFINE_config_file('config')\n"
           "out = [compclip_jax.__file__, config_files.configs_dir()]\n"
           f"for spec in ('clic', 'read:runlocal', {os.path.join(ROOT, 'configs', 'clic.py') + ':runlocal'!r}):\n"
           "  flags.FLAGS.unparse_flags()\n"
           "  flags.FLAGS(config_args.resolve_argv(['x', '--config=' + spec]))\n"
           "  out.append(flags.FLAGS.config.method + '/' + str(flags.FLAGS.config.total_steps))\n"
           "print(' '.join(out))\n")
  where = subprocess.run([py, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
  assert where.returncode == 0, where.stderr[-3000:]
  where = where.stdout.split()
  assert where[0].startswith(site) and where[1] == os.path.join(site, "compclip_jax", "_configs")  # not the checkout
  assert where[2].startswith("clic/") and where[3].startswith("read/") and where[4].startswith("clic/")
  assert where[2] != where[4]  # :runlocal is its own config
  assert os.path.exists(os.path.join(site, "compclip_jax", "weights", "clip_merges.txt.gz"))
  # the demo's shipped pretrained models come along, whole (every recorded hash checked)
  shipped = subprocess.run([py, "-c", "from compclip_jax.demo import shipped; print(shipped.check()[0])"],
                           capture_output=True, text=True, cwd=tmp_path, env=env)
  assert shipped.returncode == 0 and shipped.stdout.startswith(site), shipped.stderr[-2000:]
  # console entry points
  bindir = venv / "bin"
  for script in ("compclip-train", "compclip-evaluate", "compclip-convert", "compclip-prepare", "compclip-demo",
                 "compclip-compile", "compclip-bench"):
    out = subprocess.run([str(bindir / script), "--help"], capture_output=True, text=True, cwd=tmp_path, env=env)
    text = out.stdout + out.stderr
    assert out.returncode in (0, 1) and "Traceback" not in text and "--" in text, (script, text[-2000:])
  out = subprocess.run([str(bindir / "compclip-train"), "--config=nosuch", f"--workdir={tmp_path / 'w'}"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
  assert out.returncode == 2 and "no config named 'nosuch' (known: clic, clic_read, clip, negclip, read" in out.stderr
  assert "Traceback" not in out.stderr
  commands = [("compclip_jax.main",), ("compclip_jax.demo",)
             ] + [("compclip_jax", c) for c in ("train", "evaluate", "convert", "prepare", "bench")]
  for module in commands:
    out = subprocess.run([py, "-m", *module, "--help"], capture_output=True, text=True, cwd=tmp_path, env=env)
    text = out.stdout + out.stderr
    # argparse exits 0 after --help, absl 1; either way the flags are listed and nothing failed
    assert out.returncode in (0, 1) and "Traceback" not in text and "--" in text, (module, text[-2000:])


def test_pyproject_lists_every_package():
  """pyproject names its packages explicitly (for the configs mapping): a new subpackage must be added there."""
  import tomllib
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
  found = {
      os.path.relpath(d, ROOT).replace(os.sep, ".") for d, _, fs in os.walk(os.path.join(ROOT, "compclip_jax"))
      if "__init__.py" in fs
  }
  assert found | {"compclip_jax._configs"} == listed
