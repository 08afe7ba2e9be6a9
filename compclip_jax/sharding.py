"""Device mesh ('data', 'fsdp') and shardings: batch over both axes, large parameters FSDP-sharded (DESIGN §4).

The same code runs on 1 CPU, a fake 8-device CPU mesh, one GPU and a TPU pod: the mesh shape comes from config
(-1 = all remaining devices) and a parameter is sharded over 'fsdp' along its largest dimension divisible by the
fsdp size when it has at least `min_size` elements; everything else is replicated.
"""
from __future__ import annotations

import re
from typing import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from compclip_jax.weights.params import tree_path_str

BATCH = P(("data", "fsdp"))


def make_mesh(data: int = -1, fsdp: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
  devices = list(devices if devices is not None else jax.devices())
  n = len(devices)
  if data == -1 and fsdp == -1:
    raise ValueError("mesh: at most one of data / fsdp may be -1")
  data = n // fsdp if data == -1 else data
  fsdp = n // data if fsdp == -1 else fsdp
  if data * fsdp != n:
    raise ValueError(f"mesh data={data} × fsdp={fsdp} does not use the {n} available devices")
  return Mesh(np.asarray(devices).reshape(data, fsdp), ("data", "fsdp"), axis_types=(AxisType.Auto, AxisType.Auto))


def param_spec(shape: tuple[int, ...], fsdp: int, min_size: int) -> P:
  if fsdp == 1 or int(np.prod(shape)) < min_size:
    return P()
  for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
    if shape[dim] % fsdp == 0:
      return P(*[("fsdp" if d == dim else None) for d in range(len(shape))])
  return P()


def state_shardings(mesh: Mesh, state, min_size: int = 2 ** 18, rules: Sequence[tuple[str, P]] = ()):
  """A NamedSharding per leaf of an (abstract or concrete) pytree of parameters; `rules` (regex, spec) override the
  size rule for matching parameter paths."""
  fsdp = mesh.shape["fsdp"]
  compiled = [(re.compile(r), spec) for r, spec in rules]

  def leaf(path, x):
    name = tree_path_str(path)
    for pat, spec in compiled:
      if pat.fullmatch(name):
        return NamedSharding(mesh, spec)
    return NamedSharding(mesh, param_spec(tuple(np.shape(x)), fsdp, min_size))

  return jax.tree_util.tree_map_with_path(leaf, state)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, BATCH)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())
