"""Where a compiled step's memory traffic goes: each top-level instruction of an optimised HLO module (a fusion, a
copy, a collective, a custom call; not the instructions inside a fusion, which stay on chip) reads its operands and
writes its result in HBM, so its bytes are their sizes. Summed by what the instruction computes (the `op_name` of
its metadata, with layer numbers folded: "text_model/encoder/layers/*/mlp/fc1"), this apportions what the compiler's
cost analysis reports as one "bytes accessed" figure (the sum here is an estimate of it: the compiler's own count
differs in what it charges to parameters read in place and to loops).

  python tools/hlo_traffic.py HLO.txt [--top=25]            # an HLO text (python -m compclip_jax compile --hlo=DIR)
  python tools/hlo_traffic.py HLO.txt --record=NAME --command="…"   # its groups → docs/measured/NAME.json

Groups (`group`): the backward pass's matmuls and the rest of it, the forward pass run again by rematerialisation,
the forward pass, and apart from the passes the attention's own products and softmax, the layout copies XLA inserts
between them, the collectives and the optimiser's update.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8,
          "u64": 8, "f64": 8}
_SHAPE = re.compile(r"\b(pred|s8|u8|s16|u16|s32|u32|s64|u64|bf16|f16|f32|f64)\[([\d,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([a-z][\w\-]*)\((.*)$")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_SKIP = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast", "copy-done", "slice-done", "all-gather-done",
         "all-reduce-done", "collective-permute-done", "async-done", "opt-barrier", "partition-id", "replica-id")


def shape_bytes(text: str) -> int:
  total = 0
  for t, dims in _SHAPE.findall(text):
    n = 1
    for d in dims.split(","):
      if d:
        n *= int(d)
    total += _BYTES[t] * n
  return total


AFTER = "after the gradient/"


def _where(op_name: str) -> str:
  """An op_name → what it computes, layers folded (jit(step)/…/text_model/encoder/layers/3/mlp/fc1/dot_general).
  What neither the forward pass (under `jvp`) nor the backward (`transpose`) computes comes after the gradient: the
  optimiser's update, fused by XLA with the gradient and parameter norms it reads the same tensors for (`AFTER`)."""
  path = re.sub(r"/(\d+)(?=/)", "/*", re.sub(r"^jit\([^()]*\)/", "", op_name))
  if "jvp(" not in path and "transpose(" not in path:
    path = AFTER + path
  path = re.sub(r"\b(jvp|transpose|vmap|checkpoint|remat|rematted_computation|while|body|cond)\(([^()]*)\)", r"\2",
                path)
  return path


def traffic(hlo: str) -> collections.Counter:
  """{what: bytes} over the top-level instructions of every computation of `hlo` that no fusion calls."""
  fused = set(re.findall(r"\bfusion\(.*?calls=%([\w.\-]+)", hlo))
  sizes, out, skip = {}, collections.Counter(), False
  for line in hlo.splitlines():
    if line and not line[0].isspace():  # a computation's header: "%name (…) -> … {" or "ENTRY %name …"
      header = re.match(r"(?:ENTRY\s+)?%([\w.\-]+)", line)
      skip = bool(header) and header.group(1) in fused
      continue
    m = _INSTR.match(line)
    if not m:
      continue
    name, result, op, rest = m.groups()
    sizes[name] = shape_bytes(result)
    if skip or op in _SKIP:
      continue
    operands = re.findall(r"%([\w.\-]+)", rest.split("),")[0])
    if op == "slice-start":  # an async slice of a weight into on-chip memory: ((operand), slice, context) read once
      shapes = _SHAPE.findall(result)
      nbytes = shape_bytes("{}[{}]".format(*shapes[1])) if len(shapes) > 1 else 0
    else:
      nbytes = sizes[name] + sum(sizes.get(o, 0) for o in operands)
    where = _OP_NAME.search(line)
    target = _TARGET.search(line) if op == "custom-call" else None
    out[f"{op}: {_where(where.group(1)) if where else (target.group(1) if target else '?')}"] += nbytes
  return out


GROUPS = ("attention (scores, softmax, weighted sum)", "layout copies", "rematerialised forward", "backward matmuls",
          "backward, other", "forward matmuls", "forward, other", "weights into on-chip memory", "collectives",
          "optimiser and the rest")


def group(key: str) -> str:
  """A `traffic` key ("op: what") → one of GROUPS."""
  op, what = key.split(": ", 1)
  if op in ("all-reduce", "all-gather", "all-gather-start", "reduce-scatter", "collective-permute",
            "collective-permute-start", "all-to-all", "all-reduce-start"):
    return "collectives"
  if op.startswith("copy"):
    return "layout copies"
  if op == "slice-start" or what == "ConcatBitcast":  # a weight's slices brought on chip, and joined there
    return "weights into on-chip memory"
  if what.startswith(AFTER):
    return "optimiser and the rest"
  if re.search(r"bqhd|bhqk|bkhd|BTNH|BNTS|softmax|dot_product_attention|reduce_max|pallas_call", what):
    return GROUPS[0]
  if "rematted_computation" in what:
    return "rematerialised forward"
  if "transpose(" in what or what.startswith("transpose"):
    return "backward matmuls" if "dot_general" in what else "backward, other"
  if "dot_general" in what or "conv" in what:
    return "forward matmuls"
  if re.search(r"adam|optax|scale_by|update|tree_", what):
    return "optimiser and the rest"
  return "forward, other" if what != "?" else "optimiser and the rest"


def record(name: str, hlo_path: str, command: str, compiler_bytes: float) -> dict:
  """docs/measured/NAME.json: the HLO's traffic by GROUPS (GB), its total, and the compiler's own figure."""
  import jax  # pylint: disable=import-outside-toplevel
  with open(hlo_path) as f:
    t = traffic(f.read())
  groups = collections.Counter()
  for k, b in t.items():
    groups[group(k)] += b
  out = {
      "what": "where a compiled step's HBM traffic goes, by what its top-level instructions compute",
      "command": command, "machine": f"{os.cpu_count()} CPU cores (libtpu's compiler)",
      "date": datetime.date.today().isoformat(), "versions": {"jax": jax.__version__,
                                                              "python": platform.python_version()},
      "source": "tools/hlo_traffic.py", "figures": {
          "total_gb": sum(groups.values()) / 1e9, "compiler_gb": compiler_bytes / 1e9,
          "groups_gb": {g: groups[g] / 1e9 for g in GROUPS}
      }
  }
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "measured", f"{name}.json")
  with open(path, "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("hlo")
  p.add_argument("--top", type=int, default=25)
  p.add_argument("--record", help="write the groups into docs/measured/RECORD.json")
  p.add_argument("--command", default="", help="with --record: the command that wrote the HLO")
  p.add_argument("--compiler_bytes", type=float, default=0.0, help="with --record: the compiler's bytes accessed")
  a = p.parse_args()
  if a.record:
    print(json.dumps(record(a.record, a.hlo, a.command, a.compiler_bytes)["figures"], indent=1))
    return
  with open(a.hlo) as f:
    t = traffic(f.read())
  total = sum(t.values())
  print(f"{total / 1e9:.1f} GB over {len(t)} kinds of instruction")
  for what, b in t.most_common(a.top):
    print(f"{b / 1e9:8.2f} GB {100 * b / total:5.1f} %  {what[:150]}")


if __name__ == "__main__":
  main()
