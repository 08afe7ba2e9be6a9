"""The host allocator policy (compclip_jax/cli/host_memory.py): a repeated CPU step stops page-faulting its
temporaries in, only when asked (COMPCLIP_HOST_MALLOC=keep), and a bad setting is a clear error."""
import os
import subprocess
import sys

import pytest

from tests import paths
from compclip_jax.cli import host_memory

ROOT = paths.ROOT
# 256 MB blocks (far above glibc's largest mmap threshold, 32 MB: what a large step's temporaries are) allocated,
# touched and freed six times through the process's own malloc, as XLA:CPU's runtime does at every execution; the
# minor page faults of rounds 2-6 together. (An XLA program is not the probe: how much of a step's temporaries XLA:CPU
# takes from malloc changes with its version and flags; at jax 0.10.2 a 256 MB matmul chain faulted ~5,000 pages a
# run, not 65,000, and -O0 changed that again. What this module controls is malloc's behaviour, so that is measured.)
PROBE = """
import ctypes, resource
from compclip_jax.cli import host_memory
applied = host_memory.keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 256 << 20
faults = []
for _ in range(6):
  r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  p = libc.malloc(size)
  ctypes.memset(p, 1, size)
  libc.free(p)
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
  # glibc's defaults: each 256 MB block is mmapped and unmapped, so every round faults its 65,536 pages in again
  # (fewer where the kernel backs it with huge pages); kept: the heap keeps them, ~0 faults after the first round
  assert not applied and default > 5 * 2_000 and kept < 2_000 and kept * 20 < default, (kept, default)


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
