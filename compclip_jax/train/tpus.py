"""TPU slices as the compile check sees them: slice names → libtpu topology strings, each generation's chip
(HBM, TensorCores, dense bf16 peak, HBM bandwidth), and the compile-only devices of a topology on a CPU host, as a
real VM of that slice lists them in `jax.devices()`.

Chip figures: Google Cloud's TPU system-architecture pages (cloud.google.com/tpu/docs/v2, v4, v5e, v5p, v6e, tpu7x).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re

from compclip_jax.errors import UserError

INSTALL = 'pip install -r requirements-tpu-compile.txt   (jax[tpu]==0.10.2: libtpu from PyPI)'


@dataclasses.dataclass(frozen=True)
class Chip:
  generation: str
  hbm_gib: float  # per chip
  cores: int  # TensorCores per chip
  peak_flops: float  # dense bf16 FLOP/s per chip
  hbm_bw: float  # bytes/s per chip
  # libtpu's chip configuration, as a VM's runtime uses it: "megacore" fuses a v4 / v5p chip's two TensorCores into
  # one device (what jax.devices() lists there; MaxText and AXLearn compile them so), "default" is one device per
  # TensorCore (v2, v3, and tpu7x, whose two cores are two devices of half the chip's HBM each)
  chip_config: str = "default"


CHIPS = {
    "v2": Chip("v2", 16, 2, 45e12, 700e9),
    "v3": Chip("v3", 32, 2, 123e12, 900e9),
    "v4": Chip("v4", 32, 2, 275e12, 1228e9, "megacore"),
    "v5e": Chip("v5e", 16, 1, 197e12, 819e9),
    "v5p": Chip("v5p", 95, 2, 459e12, 2765e9, "megacore"),
    "v6e": Chip("v6e", 32, 1, 918e12, 1640e9),
    "tpu7x": Chip("tpu7x", 192, 2, 2307e12, 7380e9),
}
# chips → topology per generation; v2/v3/v4/v5p slice names count TensorCores (2 per chip), v5e/v6e count chips;
# tpu7x takes topology strings only (tpu7x:2x2x2 is 8 chips, 16 devices)
_SHAPES_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_SHAPES_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8"}


def resolve(name: str) -> tuple[str, Chip, int]:
  """A slice name (v5e-8, v4-8, v5p-128, …) or a topology string (v5e:2x4) → (topology string, chip, chips)."""
  m = re.fullmatch(r"(v\d[a-z]?|tpu7x)(?::(\d+(?:x\d+)+)|-(\d+))", name.strip())
  if not m or m.group(1) not in CHIPS or (m.group(1) == "tpu7x" and not m.group(2)):
    raise UserError(f"--topology={name}: use a slice name (v4-8, v5e-8, v5e-16, v5e-256, v5p-8, v6e-8, …) or a "
                    f"topology (v5e:2x4, v4:2x2x1, tpu7x:2x2x2, …) of {', '.join(CHIPS)}")
  gen, shape, count = m.group(1), m.group(2), m.group(3)
  chip = CHIPS[gen]
  if shape:
    return f"{gen}:{shape}", chip, math.prod(int(d) for d in shape.split("x"))
  n = int(count) // (2 if gen in ("v2", "v3", "v4", "v5p") else 1)
  table = _SHAPES_2D if gen in ("v2", "v3", "v5e", "v6e") else _SHAPES_3D
  if n not in table:
    raise UserError(f"--topology={name}: {n} chips is no slice this command knows; give a topology string "
                    f"({gen}:AxB{'xC' if table is _SHAPES_3D else ''})")
  return f"{gen}:{table[n]}", chip, n


CHIP_CONFIGS = ("default", "megacore")


def compile_only_devices(topology: str, num_slices: int = 1, chip_config: str = "") -> list:
  """The devices of `topology` (× `num_slices`), compile-only, on this host: libtpu's topology description with the
  generation's chip configuration as a VM runs it (`Chip.chip_config`: a v4-8 is 4 megacore devices of 32 GiB), or
  `chip_config` (CHIP_CONFIGS; "default" on a v4: 8 devices of one TensorCore and 16 GiB)."""
  if chip_config and chip_config not in CHIP_CONFIGS:
    raise UserError(f"--chip_config={chip_config}: use one of {', '.join(CHIP_CONFIGS)} (or leave it out: the VM's)")
  for k, v in (("JAX_PLATFORMS", "cpu"), ("TPU_SKIP_MDS_QUERY", "1"), ("ALLOW_MULTIPLE_LIBTPU_LOAD", "true")):
    os.environ.setdefault(k, v)
  try:
    import libtpu  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError as e:
    raise UserError(f"libtpu is not installed, so no TPU compiler is here: {INSTALL}") from e
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  gen = topology.split(":")[0]
  kw = {"chip_config_name": chip_config or CHIPS[gen].chip_config} if gen in CHIPS else {}
  if num_slices > 1:
    kw["num_slices"] = num_slices
  if topology.endswith(":1x1"):  # a single chip: libtpu needs its host bounds (as MaxText passes them)
    kw["chips_per_host_bounds"] = (1, 1, 1)
  try:
    desc = topologies.get_topology_desc(platform="tpu", topology_name=topology, **kw)
  except Exception as e:  # pylint: disable=broad-except  # libtpu's refusal: one line
    raise UserError(f"libtpu cannot make topology {topology}: {' '.join(str(e).split())[:200]}") from e
  return sorted(desc.devices, key=lambda d: (getattr(d, "slice_index", 0), d.id))


# device_kind as libtpu names each generation's chips (compile-only devices and real ones alike)
_KINDS = (("tpu7x", "tpu7x"), ("v6 lite", "v6e"), ("v6e", "v6e"), ("v5 lite", "v5e"), ("v5e", "v5e"), ("v5p", "v5p"),
          ("v5", "v5p"), ("v4", "v4"), ("v3", "v3"), ("v2", "v2"))


def chip_of(device) -> Chip:
  """The Chip of a TPU device, by its device_kind ("TPU v5 lite" → v5e)."""
  kind = device.device_kind.lower()
  for needle, gen in _KINDS:
    if needle in kind:
      return CHIPS[gen]
  raise UserError(f"unknown TPU device kind {device.device_kind!r}: give a topology (--topology=v5e-8)")


def device_hbm_bytes(chip: Chip, device) -> int:
  """HBM of one device: a chip's share by TensorCores (a v4 core alone: half the chip; megacore: all of it)."""
  cores = getattr(device, "num_cores", None) or chip.cores
  return int(chip.hbm_gib * 2 ** 30 * min(cores, chip.cores) / chip.cores)
