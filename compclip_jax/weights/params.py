"""Flat `{dotted.path: array}` views of NNX models, and building a model straight from loaded arrays."""
from __future__ import annotations

from typing import Callable, Mapping, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

M = TypeVar("M", bound=nnx.Module)


def _dotted(path) -> str:
  return ".".join(str(p) for p in path)


def tree_path_str(path) -> str:
  """A jax tree path into an nnx.State (DictKeys, then the Variable's `value`) → 'text_model.encoder.layers.0…'."""
  return ".".join(str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey))


def abstract(ctor: Callable[[], M]) -> M:
  """The model `ctor()` would build, with ShapeDtypeStructs instead of arrays (nothing is allocated)."""
  return nnx.eval_shape(ctor)


def shapes(model: nnx.Module) -> dict[str, tuple[int, ...]]:
  """{path: shape} of every nnx.Param (works on abstract and concrete models)."""
  return {_dotted(p): tuple(v.get_value().shape) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def flat_params(model: nnx.Module) -> dict[str, np.ndarray]:
  """{path: numpy array} of every nnx.Param (host copies, in the stored dtype)."""
  state = nnx.state(model, nnx.Param)
  return {_dotted(p): np.asarray(jax.device_get(v.get_value())) for p, v in nnx.to_flat_state(state)}


def fill(abstract_model: M, params: Mapping[str, np.ndarray]) -> M:
  """A concrete model from an `abstract` one and {path: array} (cast to each parameter's dtype).

  Loading a checkpoint this way costs the file read and one device copy; no random init is run.
  """
  graphdef, state, rest = nnx.split(abstract_model, nnx.Param, ...)
  flat = nnx.to_flat_state(state)
  missing = [_dotted(p) for p, _ in flat if _dotted(p) not in params]
  assert not missing, f"no value for {missing[:5]}"
  # Non-Param state (none today) would stay abstract; refuse rather than return a half-built model.
  assert not jax.tree.leaves(rest), "model has non-parameter state that a checkpoint cannot fill"
  # Cast on the host (numpy/ml_dtypes) and copy everything to the device in one call: one transfer, no per-array
  # dispatch (this is most of `load_clip`'s time).
  host = [np.asarray(params[_dotted(path)], dtype=var.get_value().dtype) for path, var in flat]
  for (_, var), value in zip(flat, jax.device_put(host)):
    var.set_value(value)
  return nnx.merge(graphdef, nnx.from_flat_state(flat), rest)
