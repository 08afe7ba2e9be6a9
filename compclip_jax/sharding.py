"""Device mesh ('data', 'fsdp') and shardings: batch over both axes, large parameters FSDP-sharded (docs/tpu.md).

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


def param_spec(shape: tuple[int, ...], n: int, min_size: int, axis: str | tuple[str, ...] = "fsdp") -> P:
  """Sharded over `axis` (of `n` devices) along the largest dimension `n` divides, at ≥ `min_size` elements."""
  if n == 1 or int(np.prod(shape)) < min_size:
    return P()
  for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):
    if shape[dim] % n == 0:
      return P(*[(axis if d == dim else None) for d in range(len(shape))])
  return P()


def state_shardings(mesh: Mesh, state, min_size: int = 2 ** 18, rules: Sequence[tuple[str, P]] = (),
                    every_device: bool = False):
  """A NamedSharding per leaf of an (abstract or concrete) pytree of parameters; `rules` (regex, spec) override the
  size rule for matching parameter paths. `every_device`: shard over both mesh axes, all the devices (the optimiser
  state with `mesh.shard_optimizer`), instead of 'fsdp' alone."""
  axis = ("data", "fsdp") if every_device else "fsdp"
  n = mesh.size if every_device else mesh.shape["fsdp"]
  compiled = [(re.compile(r), spec) for r, spec in rules]

  def leaf(path, x):
    name = tree_path_str(path)
    for pat, spec in compiled:
      if pat.fullmatch(name):
        return NamedSharding(mesh, spec)
    return NamedSharding(mesh, param_spec(tuple(np.shape(x)), n, min_size, axis))

  return jax.tree_util.tree_map_with_path(leaf, state)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, BATCH)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


class HostAgreement:
  """The largest of one integer over all processes, agreed host to host, once per call, in the same order on every
  process (each call is numbered).

  Through jax.distributed's coordination service (key-value store): a device all-gather
  (`multihost_utils.process_allgather`) would be queued behind the step running on the devices, so the host would
  wait for it before it could put the next batch on the devices. Each process removes its own key of two calls ago:
  by then every process has read it (it could not have reached the previous call without it). Without the service
  (one process, or an older jax) it falls back to the all-gather.
  """
  def __init__(self, name: str = "compclip/width"):
    self.name, self.calls = name, 0

  def max(self, value: int) -> int:
    if jax.process_count() == 1:
      return int(value)
    from jax._src import distributed  # pylint: disable=import-outside-toplevel
    client = getattr(distributed.global_state, "client", None)
    if client is None or not hasattr(client, "blocking_key_value_get"):
      from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
      return int(np.max(multihost_utils.process_allgather(np.int32(value))))
    key = lambda call, p: f"{self.name}/{call}/{p}"
    me, n = jax.process_index(), jax.process_count()
    client.key_value_set(key(self.calls, me), str(int(value)))
    out = max(int(client.blocking_key_value_get(key(self.calls, p), 600_000)) for p in range(n))
    if self.calls >= 2:
      client.key_value_delete(key(self.calls - 2, me))
    self.calls += 1
    return out
