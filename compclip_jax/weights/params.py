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


def param_shapes(ctor: Callable[[], M]) -> dict[str, tuple[int, ...]]:
  """{path: shape} of the model `ctor()` would build, without allocating it."""
  _, state = nnx.split(nnx.eval_shape(ctor), nnx.Param, ...)[:2]
  return {_dotted(p): tuple(v.get_value().shape) for p, v in nnx.to_flat_state(state)}


def flat_params(model: nnx.Module) -> dict[str, np.ndarray]:
  """{path: numpy array} of every nnx.Param (host copies, in the stored dtype)."""
  state = nnx.state(model, nnx.Param)
  return {_dotted(p): np.asarray(jax.device_get(v.get_value())) for p, v in nnx.to_flat_state(state)}


def build_with_params(ctor: Callable[[], M], params: Mapping[str, np.ndarray]) -> M:
  """`ctor()` with its parameters replaced by `params` (cast to each parameter's dtype), without a random init.

  The model is traced abstractly, so loading a checkpoint costs the file read and one device copy, nothing more.
  """
  graphdef, state, rest = nnx.split(nnx.eval_shape(ctor), nnx.Param, ...)
  flat = nnx.to_flat_state(state)
  missing = [_dotted(p) for p, _ in flat if _dotted(p) not in params]
  assert not missing, f"no value for {missing[:5]}"
  for path, var in flat:
    var.set_value(jnp.asarray(params[_dotted(path)], dtype=var.get_value().dtype))
  state = nnx.from_flat_state(flat)
  # Non-Param state (none today) would still be abstract; refuse rather than return a half-built model.
  assert not jax.tree.leaves(rest), "model has non-parameter state that a checkpoint cannot fill"
  return nnx.merge(graphdef, state, rest)
