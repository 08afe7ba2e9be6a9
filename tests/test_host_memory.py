"""The host allocator policy (compclip_jax/host_memory.py): a repeated CPU step stops page-faulting its
temporaries in, only where it is wanted, and a bad setting is a clear error."""
import os
import subprocess
import sys

import pytest

from compclip_jax import host_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a jitted function with ~64 MB temporaries ([4000, 4000] fp32; above glibc's largest mmap threshold, 32 MB), run
# three times; the minor page faults of the third run
PROBE = """
import resource
import jax, jax.numpy as jnp
from compclip_jax import host_memory
applied = host_memory.keep_freed_memory()
x = jnp.ones((4000, 512), jnp.float32)
f = jax.jit(lambda x: jnp.tanh(jnp.tanh(x @ x.T) @ x).sum())
for _ in range(3):
  r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x).block_until_ready()
  faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0
print(applied, faults)
"""


def _probe(choice):
  env = dict(os.environ, COMPCLIP_HOST_MALLOC=choice, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  applied, faults = out.stdout.split()
  return applied == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_memory_is_reused_by_the_next_step_without_page_faults():
  applied, faults = _probe("keep")
  assert applied and faults < 100  # measured: 0
  applied, faults = _probe("default")
  assert not applied and faults > 1000  # glibc's defaults: the temporaries come back from the kernel every time


def test_auto_applies_only_where_jax_runs_on_the_cpu(tmp_path):
  none = (str(tmp_path / "nothing*"),)
  gpu = tmp_path / "nvidia0"
  gpu.write_text("")
  assert host_memory.cpu_only_host({}, none)
  assert not host_memory.cpu_only_host({}, (str(tmp_path / "nvidia[0-9]*"),))
  assert host_memory.cpu_only_host({"JAX_PLATFORMS": "cpu"}, (str(gpu),))
  assert not host_memory.cpu_only_host({"JAX_PLATFORMS": "cuda"}, none)
  assert not host_memory.cpu_only_host({"JAX_PLATFORMS": "tpu,cpu"}, none)
  assert host_memory.wanted({"COMPCLIP_HOST_MALLOC": "keep", "JAX_PLATFORMS": "cuda"})
  assert not host_memory.wanted({"COMPCLIP_HOST_MALLOC": "default", "JAX_PLATFORMS": "cpu"})
  assert host_memory.wanted({"JAX_PLATFORMS": "cpu"})  # auto


def test_an_unknown_setting_is_a_user_error(tmp_path):
  with pytest.raises(host_memory.HostMallocError, match="COMPCLIP_HOST_MALLOC='yes'"):
    host_memory.wanted({"COMPCLIP_HOST_MALLOC": "yes"})
  env = dict(os.environ, COMPCLIP_HOST_MALLOC="yes", PYTHONPATH=ROOT)
  out = subprocess.run([
      sys.executable, "-m", "compclip_jax.main", "--config=configs/clip.py:runlocal", f"--workdir={tmp_path}/w"
  ], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert out.returncode == 2 and "COMPCLIP_HOST_MALLOC='yes'" in out.stderr and "Traceback" not in out.stderr
