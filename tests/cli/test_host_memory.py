"""The host allocator policy (compclip_jax/cli/host_memory.py): a repeated CPU step stops page-faulting its
temporaries in, only when asked (COMPCLIP_HOST_MALLOC=keep), and a bad setting is a clear error."""
import os
import subprocess
import sys

import pytest

from tests import paths
from compclip_jax.cli import host_memory

ROOT = paths.ROOT
# a jitted function with 256 MB temporaries ([8000, 8000] fp32; far above glibc's largest mmap threshold, 32 MB), run
# six times; the minor page faults of runs 2-6 together
PROBE = """
import resource
import jax, jax.numpy as jnp
from compclip_jax.cli import host_memory
applied = host_memory.keep_freed_memory()
x = jnp.ones((8000, 256), jnp.float32)
f = jax.jit(lambda x: jnp.tanh(jnp.tanh(x @ x.T) @ x).sum())
faults = []
for _ in range(6):
  r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)
print(applied, sum(faults[1:]))
"""


def _probe(choice):
  env = dict(os.environ, COMPCLIP_HOST_MALLOC=choice, PYTHONPATH=ROOT)
  out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  applied, faults = out.stdout.split()
  return applied == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_memory_is_reused_by_the_next_step_without_page_faults():
  applied, kept = _probe("keep")
  assert applied
  applied, default = _probe("default")
  # glibc's defaults: the temporaries come back from the kernel at (nearly) every run, ≥ 65,000 pages each
  assert not applied and default > 100_000 and kept * 20 < default, (kept, default)


def test_off_unless_asked():
  assert not host_memory.wanted({})
  assert not host_memory.wanted({"COMPCLIP_HOST_MALLOC": "default"})
  assert host_memory.wanted({"COMPCLIP_HOST_MALLOC": "keep"})
  assert not host_memory.keep_freed_memory({})


def test_an_unknown_setting_is_a_user_error(tmp_path):
  with pytest.raises(host_memory.HostMallocError, match="COMPCLIP_HOST_MALLOC='yes'"):
    host_memory.wanted({"COMPCLIP_HOST_MALLOC": "yes"})
  env = dict(os.environ, COMPCLIP_HOST_MALLOC="yes", PYTHONPATH=ROOT)
  out = subprocess.run([
      sys.executable, "-m", "compclip_jax.main", "--config=configs/clip.py:runlocal", f"--workdir={tmp_path}/w"
  ], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
  assert out.returncode == 2 and "COMPCLIP_HOST_MALLOC='yes'" in out.stderr and "Traceback" not in out.stderr
