"""An opt-in host allocator policy for large steps that run on the CPU (docs/performance.md, "Host memory").

Why: XLA:CPU allocates a step's temporaries anew at every execution (gigabytes for a ViT-B/32 CLIC step at 77
tokens). Under glibc malloc's defaults they come from per-thread arenas and from mmap, and go back to the kernel when
freed, so every step page-faults its temporaries in again. Keeping freed memory in the process for the next step
removes those faults from the second step on; the measured effect on the CLIC step (faults, kernel time, the
side-by-side with the official PyTorch step, `bench train`) is in docs/performance.md, "Host memory".

The policy, through glibc's `mallopt`: one arena shared by all threads (M_ARENA_MAX = 1), no mmap for large blocks
(M_MMAP_MAX = 0), no trimming of the heap's top (M_TRIM_THRESHOLD = max), 256 MB of padding when the heap grows
(M_TOP_PAD). Two arenas do not remove the faults reliably (measured).

Why opt-in: the one arena costs small steps — `:runlocal` and demo-sized training lose samples/s to lock
contention among the data pipeline's and XLA's threads (docs/performance.md) — and the process keeps its
peak heap until it exits. So `COMPCLIP_HOST_MALLOC=keep` turns it on (CPU training or benchmarks at real widths);
`default` (the default) leaves glibc's defaults.
"""
from __future__ import annotations

import ctypes
import os
import sys

from compclip_jax.errors import UserError

ENV = "COMPCLIP_HOST_MALLOC"
CHOICES = ("default", "keep")
# glibc's mallopt parameter numbers (malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -4, -8
TOP_PAD = 256 << 20  # the heap grows in steps of at least this (without it: ~1,500 faults a step in the test)


class HostMallocError(UserError, ValueError):
  """An unknown COMPCLIP_HOST_MALLOC value."""


def wanted(environ=os.environ) -> bool:
  choice = environ.get(ENV, "default").strip() or "default"
  if choice not in CHOICES:
    raise HostMallocError(f"{ENV}={choice!r}: use one of {CHOICES}")
  return choice == "keep"


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
