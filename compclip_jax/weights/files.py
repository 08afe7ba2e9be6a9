"""Reading and writing PyTorch state dicts as numpy, pickle-free unless the user holds a torch pickle.

- `.safetensors` (single file or an HF sharded index) is read without torch, bf16 included (via ml_dtypes).
- `.bin` / `.pt` / `.pth` are torch pickles: read only with `torch.load(weights_only=True)`, which refuses arbitrary
  code; torch must be installed for those.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Mapping

import ml_dtypes
import numpy as np

from compclip_jax.errors import InputError

FORMATS = ("hf", "open_clip", "compclip")  # what save_clip writes (here: the CLIs name them without importing jax)

_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I64": np.int64,
    "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_
}
_ST_NAMES = {np.dtype(v): k for k, v in _ST_DTYPES.items()}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth")
# Wrappers that training scripts put around a model's keys (DDP, CLIC's own checkpoints).
_PREFIXES = ("module.model.", "module.", "model.")


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """{key: array} from one .safetensors file, memory-mapped (arrays are read-only views)."""
  with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
  data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
  out = {}
  for key, info in header.items():
    if key == "__metadata__":
      continue
    if info["dtype"] not in _ST_DTYPES:
      raise ValueError(f"{path}: tensor {key} has dtype {info['dtype']}, which this reader does not support")
    start, end = info["data_offsets"]
    out[key] = data[start:end].view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
  return out


def write_safetensors(tensors: Mapping[str, np.ndarray], path: str, metadata: Mapping[str, str] | None = None) -> int:
  """Writes {key: array} (C-contiguous copies) and returns the number of bytes written. Atomic via rename."""
  header, offset, arrays = {}, 0, []
  for key in sorted(tensors):
    a = np.asarray(tensors[key], order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    header[key] = {"dtype": _ST_NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
    offset += a.nbytes
    arrays.append(a)
  header["__metadata__"] = dict(metadata or {"format": "pt"})
  blob = json.dumps(header, separators=(",", ":")).encode()
  blob += b" " * (-len(blob) % 8)  # keep tensor data 8-byte aligned
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(struct.pack("<Q", len(blob)) + blob)
    for a in arrays:
      f.write(a.tobytes())
  os.replace(tmp, path)
  return 8 + len(blob) + offset


def read_torch_pickle(path: str) -> dict[str, np.ndarray]:
  """A torch `.bin/.pt/.pth` state dict, loaded with `weights_only=True` (no arbitrary code runs)."""
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ImportError(f"{path} is a torch pickle; reading it needs torch (`pip install torch`), or convert it to "
                      ".safetensors first") from e
  obj = torch.load(path, map_location="cpu", weights_only=True)
  if isinstance(obj, Mapping) and "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
    obj = obj["state_dict"]
  if not isinstance(obj, Mapping):
    raise InputError(f"{path}: expected a state dict (or a dict with 'state_dict'), found {type(obj).__name__}")
  return {
      k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in obj.items() if isinstance(v, torch.Tensor)
  }


def read_state_dict(path: str) -> dict[str, np.ndarray]:
  """Any single-file state dict: .safetensors, or a torch pickle read safely."""
  if path.endswith(".safetensors"):
    return read_safetensors(path)
  if path.endswith(PICKLE_SUFFIXES):
    return read_torch_pickle(path)
  raise InputError(f"{path}: unknown weights file type; expected .safetensors, .bin, .pt or .pth")


def read_hf_weights(directory: str) -> dict[str, np.ndarray]:
  """The weights of an HF model directory: model.safetensors, a sharded index, or pytorch_model.bin (safely)."""
  single = os.path.join(directory, "model.safetensors")
  index = os.path.join(directory, "model.safetensors.index.json")
  pickle = os.path.join(directory, "pytorch_model.bin")
  if os.path.exists(single):
    return read_safetensors(single)
  if os.path.exists(index):
    with open(index) as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for shard in shards:
      out.update(read_safetensors(os.path.join(directory, shard)))
    return out
  if os.path.exists(pickle):
    return read_torch_pickle(pickle)
  raise FileNotFoundError(f"{directory}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def strip_wrapper_prefix(sd: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Removes a `module.` / `module.model.` / `model.` prefix shared by every key (DDP and CLIC checkpoints)."""
  for p in _PREFIXES:
    if sd and all(k.startswith(p) for k in sd):
      return {k[len(p):]: v for k, v in sd.items()}
  return dict(sd)
