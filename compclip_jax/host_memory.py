"""The host allocator's policy for steps that run on the CPU (docs/performance.md, "Host memory").

Why: XLA:CPU allocates a step's temporaries anew at every execution (a ViT-B/32 CLIC step at 77 tokens: ~2 GB).
Under glibc malloc's defaults they come from per-thread arenas and from mmap, and go back to the kernel when freed,
so every step page-faults its temporaries in again: ~530,000 minor faults and ~1.2 s of kernel time per CLIC step
on 2 cores (measured: `getrusage` around the text tower's forward + backward). Keeping freed memory in the process
for the next step removes them (0 faults from the second step on) and made the CLIC step at 77 tokens 0.80× the
official PyTorch step's time instead of 1.02× in the side-by-side (tools/side_by_side_clic.py, which applies the
same policy to both sides).

The policy, through glibc's `mallopt`: one arena for every thread (M_ARENA_MAX = 1), no mmap for large blocks
(M_MMAP_MAX = 0), no trimming of the heap's top (M_TRIM_THRESHOLD = max), 256 MB of padding when the heap grows
(M_TOP_PAD). The cost: the process keeps its peak heap until it exits (the memory is reused by the next step, not
returned to the system) — so it is applied only where the steps run on the host's CPU.

`COMPCLIP_HOST_MALLOC` chooses: `auto` (default: applied when this host has no GPU or TPU device files and
JAX_PLATFORMS does not name an accelerator), `keep` (always), `default` (never: glibc's defaults).
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys

ENV = "COMPCLIP_HOST_MALLOC"
CHOICES = ("auto", "keep", "default")
# glibc's mallopt parameter numbers (malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -4, -8
TOP_PAD = 256 << 20
# device files of the accelerators jax drives: NVIDIA GPUs, AMD GPUs, TPU v2/v3 (accel), TPU v4+ (vfio)
ACCELERATOR_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


class HostMallocError(ValueError):
  """An unknown COMPCLIP_HOST_MALLOC value."""


def cpu_only_host(environ=os.environ, files=ACCELERATOR_FILES) -> bool:
  """True when jax will run on the CPU here: JAX_PLATFORMS names only cpu, or it is unset and no device files of
  a GPU or TPU exist."""
  platforms = environ.get("JAX_PLATFORMS", "").strip()
  if platforms:
    return platforms == "cpu"
  return not any(glob.glob(pattern) for pattern in files)


def wanted(environ=os.environ) -> bool:
  choice = environ.get(ENV, "auto").strip() or "auto"
  if choice not in CHOICES:
    raise HostMallocError(f"{ENV}={choice!r}: use one of {CHOICES}")
  return choice == "keep" or (choice == "auto" and cpu_only_host(environ))


def keep_freed_memory(environ=os.environ) -> bool:
  """Applies the policy (module docstring) if `wanted`; returns whether it was applied (False off glibc too).

  Call it first in an entry point, before jax's CPU client starts its threads (the first jax computation):
  a thread that has made its own arena keeps it.
  """
  if not wanted(environ) or not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL("libc.so.6")
    libc.gnu_get_libc_version  # pylint: disable=pointless-statement  (glibc, not musl)
  except (OSError, AttributeError):
    return False
  # mallopt takes an int; -1 is glibc's size_t maximum for the trim threshold (never trim)
  settings = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1), (M_TOP_PAD, TOP_PAD))
  return all(libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1 for param, value in settings)
