"""Ahead-of-time compile of every step kind a config runs, on any devices — a TPU topology's compile-only devices
on a CPU host (cli/compile.py), or the host's own — with the trainer's own state, rules, optimiser and shardings
(train/state.py) at the config's global batch and token width, and the evaluation encoders: the compiler's memory,
FLOPs, bytes and collectives per device, and each step's model FLOPs counted from the architecture (train/flops.py).
Nothing runs; no device memory is allocated.
"""
from __future__ import annotations

import collections
import dataclasses
import re
import time
from typing import Callable

import jax
import ml_collections
import numpy as np
from flax import nnx

from compclip_jax import methods
from compclip_jax.errors import UserError
from compclip_jax.evaluators.encoding import Encoder
from compclip_jax.models.clip import clip_of
from compclip_jax.train import flops, state, trainer
from compclip_jax import sharding

# collective ops of an HLO module, counted with their result bytes (one line per op, `-start` for async pairs)
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "collective-permute", "all-to-all")
_OP = re.compile(r"=\s*(\(?[^=]*?\)?)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\(")
_SHAPE = re.compile(r"(pred|s8|u8|s16|u16|s32|u32|s64|u64|bf16|f16|f32|f64)\[([\d,]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")
_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8,
    "u64": 8, "f64": 8
}


@dataclasses.dataclass
class StepReport:
  """One compiled step kind, per device (the SPMD partition's program)."""
  kind: str
  compile_s: float
  batch: int = 0  # global batch it was compiled for
  argument_bytes: int = 0
  output_bytes: int = 0
  alias_bytes: int = 0
  temp_bytes: int = 0
  code_bytes: int = 0
  flops: float = 0.0  # the compiler's count (a rematerialised forward counted twice)
  bytes_accessed: float = 0.0
  collectives: dict = dataclasses.field(default_factory=dict)  # op → {"count": n, "bytes": result bytes}
  error: str = ""  # the compiler's refusal (e.g. RESOURCE_EXHAUSTED: does not fit)
  model_flops: float = 0.0  # the architecture's count for the global batch (train/flops.py); 0 for the encoders
  hlo: str = dataclasses.field(default="", repr=False)  # the compiled module's text

  @property
  def hbm_bytes(self) -> int:
    """Arguments + outputs − donated aliases + temporaries + code: what the program holds at its peak."""
    return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.code_bytes


def _result_bytes(result: str) -> int:
  return sum(
      _BYTES[t] * int(np.prod([int(d) for d in dims.split(",") if d] or [1])) for t, dims in _SHAPE.findall(result))


# Multi-slice: XLA compiles one slice's program; what crosses the data-center network (DCN) between slices is a
# `send` to the megascale runtime with its transfer type (ALL_REDUCE, ALL_GATHER, ONE_TO_ONE, …), counted per send
_DCN = re.compile(r"=\s*(\(?[^=]*?\)?)\s+send\(.*_xla_megascale_transfer_type=\"([A-Z_]+)\"")

_CHANNEL = re.compile(r"channel_id=(\d+)")


def collectives(hlo_text: str) -> dict:
  """{op: {"count", "bytes"}} of the collective ops in an HLO module's text (async `-start` ops once each), and the
  traffic between slices as "dcn-<transfer type>" (e.g. "dcn-all-reduce": the sends of a cross-slice all-reduce).

  One collective is one channel: libtpu's async collective fusion splits an all-gather into pieces fused into the
  compute it overlaps, each piece an `all-gather` line with the whole result's shape and the collective's own
  `channel_id` (a ViT-B/32 step with a frozen 2-block decoder at 256 on v5e-8: 743 such lines, 6 channels). An op is
  counted once per (kind, channel), with its largest result; ops without a channel id are counted line by line."""
  seen = {}
  for i, line in enumerate(hlo_text.splitlines()):
    line = _COMMENT.sub("", line)  # a long tuple's "/*index=5*/" marks: their "=" would end the result's match
    m = _OP.search(line)
    if m:
      name, result = m.group(2), m.group(1)
    elif m := _DCN.search(line):
      name, result = "dcn-" + m.group(2).lower().replace("_", "-"), m.group(1)
    else:
      continue
    channel = _CHANNEL.search(line)
    key = (name, channel.group(1) if channel else f"line {i}")
    seen[key] = max(seen.get(key, 0), _result_bytes(result))
  out = collections.defaultdict(lambda: {"count": 0, "bytes": 0})
  for (name, _), nbytes in seen.items():
    out[name]["count"] += 1
    out[name]["bytes"] += nbytes
  return dict(out)


def abstract_batch(kind, batch: int, image_size: int, sh, text_len: int = 77) -> dict:
  """The kind's global batch (`StepKind.batch_shapes`, the text tower's full width `text_len`: CLIP's 77, SigLIP's
  64) as ShapeDtypeStructs sharded `sh`."""
  return {
      k: jax.ShapeDtypeStruct(shape, np.dtype(dt), sharding=sh)
      for k, (shape, dt) in kind.batch_shapes(batch, image_size, text_len).items()
  }


def report(kind: str, compiled, seconds: float, batch: int = 0) -> StepReport:
  """The compiler's own analysis of one compiled step."""
  mem, cost = compiled.memory_analysis(), compiled.cost_analysis()
  cost = (cost[0] if isinstance(cost, (list, tuple)) else cost) or {}
  return StepReport(kind, seconds, batch, mem.argument_size_in_bytes, mem.output_size_in_bytes, mem.alias_size_in_bytes,
                    mem.temp_size_in_bytes, mem.generated_code_size_in_bytes, float(cost.get("flops", 0.0)),
                    float(cost.get("bytes accessed", 0.0)), collectives=collectives(compiled.as_text()),
                    hlo=compiled.as_text())


def _compile(kind: str, lower: Callable[[], jax.stages.Lowered], batch: int) -> StepReport:
  """Lower and compile one program; an out-of-memory compile is a report with `error`, not a crash."""
  t0 = time.perf_counter()
  try:
    compiled = lower().compile()
  except Exception as e:  # pylint: disable=broad-except  # the compiler's refusal to fit is a row of the table
    if "RESOURCE_EXHAUSTED" not in str(e):
      raise
    return StepReport(kind, time.perf_counter() - t0, batch, error=" ".join(str(e).split())[:300])
  return report(kind, compiled, time.perf_counter() - t0, batch)


ENCODERS = ("eval_text", "eval_image")  # Encoder.lowered's programs


def _check_only(only, programs: list[str]) -> None:
  unknown = sorted(set(only) - set(programs))
  if unknown:
    raise UserError(f"--only={','.join(only)}: {', '.join(unknown)} is no program of this config; it has "
                    f"{', '.join(programs)}")


def compile_steps(c: ml_collections.ConfigDict, devices, encoders: bool = True, only: tuple[str, ...] = (),
                  text_len: int = 0) -> dict[str, StepReport]:
  """kind → StepReport of every step kind `c` runs, compiled for `devices` (a mesh of c.mesh's shape over them),
  and (`encoders`) the evaluation encoders training runs at evals.batch_size: "eval_text" at the full token width,
  "eval_image", with the trained parameters' shardings (evaluators/encoding.py's own jitted functions). `only`:
  these programs alone (a UserError names the ones there are). `text_len`: the training steps' token width (a
  bucket of data.trim_tokens, ≤ the text tower's context length); 0: the full width."""
  trainer.validate(c, inputs=False)  # a mistake in the config is the trainer's one message, not a trace
  method = methods.get(c.method)
  _check_only(only, [k.name for k in method.step_kinds(c)] + (list(ENCODERS) if encoders else []))
  mesh = sharding.make_mesh(c.mesh.data, c.mesh.fsdp, devices)
  model = state.build_model(c, method, shapes_only=True)  # no weights read, nothing random drawn
  st = state.build_state(c, model, mesh, max(1, c.total_steps or 1000), abstract=True)
  fns = state.jit_steps(c, method, model, st, mesh)
  size, batch_sh = model.clip_cfg.vision.image_size, sharding.batch_sharding(mesh)
  full = model.clip_cfg.text.context_length
  if not 0 <= text_len <= full:
    raise UserError(f"--text_len={text_len}: the text tower takes at most {full} tokens (0: all of them)")
  kinds = [k for k in method.step_kinds(c) if not only or k.name in only]
  parts, decoder = flops.trains(st.state.trainable), flops.decoder_of(model.abstract)
  out = {}
  for kind in kinds:
    batch = abstract_batch(kind, c.batch_size, size, batch_sh, text_len or full)
    r = _compile(kind.name, lambda k=kind, b=batch: fns[k.name].lower(st.state, st.frozen, b), c.batch_size)
    shapes = kind.batch_shapes(c.batch_size, size, text_len or full)
    out[kind.name] = dataclasses.replace(r, model_flops=flops.step(shapes, model.clip_cfg, decoder, parts))
  if encoders and (not only or set(only) & set(ENCODERS)):
    clip = clip_of(nnx.merge(st.graphdef, st.state.trainable, st.frozen))
    enc = Encoder(clip, None, None, c.evals.batch_size, mesh, progress=False)
    for name, lowered in enc.lowered(model.clip_cfg.text.context_length, size).items():
      if not only or name in only:
        out[name] = _compile(name, lambda lo=lowered: lo, enc.batch)
  return out
