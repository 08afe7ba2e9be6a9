"""The prepared device benchmark (docs/performance.md): train steps on whatever accelerator JAX sees.

  python -m compclip_jax bench_device [--smoke] [--budget_s=420] [--steps=5]
  python -m compclip_jax bench device [--smoke]          (the same, through the bench entry point)

Rows: CLIC step, CLIC's CLIP step and READ step (T5 v1.1-large decoder: d_model 1024, 24 layers, vocab 32128) at
ViT-B/32 with global batch 256 and 800, and a ViT-L/14 CLIC point; bf16 compute in both towers, fp32 trained
parameters and AdamW state, frozen towers stored in bf16 (the precision policy of models.clip.CLIP). Token ids
(full 77-token width, the worst case for CLIC's captions) and uint8 images are random, generated on the host and put
on the devices before the clock starts. A row whose compiled peak memory exceeds the device's memory is retried with
the text tower rematerialised, then at half the batch ("or the largest that fits").

Prints one Markdown table: samples/s, step time (median of the timed steps after warm-up), TFLOP per step and MFU
(XLA's cost analysis of the compiled step ÷ step time ÷ the device kind's dense bf16 peak, PEAK_FLOPS; blank for an
unknown kind), compiled peak memory per device, compile time.

Depends on jax, flax, optax, numpy, ml_collections and Pillow (imported by the methods' sample code), not on spaCy,
grain, orbax or transformers, so that it runs where only those travel (docs/performance.md lists the wheels); it
reuses the project's real step functions (steps.make_step with the methods' step kinds, losses, optim).
`--smoke`: tiny widths and batches, seconds on a CPU (tests/cli/test_bench_device.py runs it).
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags
from flax import nnx

from compclip_jax import methods, recipes
from compclip_jax.cli import app as cli
from compclip_jax.models import clip_config
from compclip_jax.models.t5 import T5Config
from compclip_jax.train import state, steps
from compclip_jax import sharding

# Dense bf16 peak FLOP/s per device by `jax.devices()[0].device_kind` (spec sheets; substring match, first wins).
PEAK_FLOPS = (("H200", 989e12), ("H100", 989e12), ("A100", 312e12), ("TPU v4", 275e12), ("TPU v5 lite", 197e12),
              ("TPU v5e", 197e12), ("TPU v5p", 459e12), ("TPU v5", 459e12), ("TPU v6", 918e12))
COLUMNS = ("step", "model", "global batch", "samples/s", "step time (ms)", "TFLOP/step", "MFU", "peak mem/device (GiB)",
           "compile (s)", "notes")
T5_LARGE = T5Config(vocab_size=32128, d_model=1024, d_kv=64, d_ff=2816, num_decoder_layers=24, num_heads=16)
TEXT_LEN = 77


def peak_flops(device_kind: str) -> float | None:
  for name, flops in PEAK_FLOPS:
    if name.lower() in device_kind.lower():
      return flops
  return None


@dataclasses.dataclass(frozen=True)
class Point:
  """One benchmark row: a step kind at a model shape and global batch."""
  kind: str  # "clic" | "clic_clip" | "read"
  model: str  # display name
  random: str  # model.random: "tiny" or an open_clip name
  batch: int
  t5: T5Config | None = None  # READ's decoder (v1.1 proportions: d_model, layers, vocab)

  @property
  def cfg(self) -> clip_config.CLIPConfig:
    return clip_config.tiny() if self.random == "tiny" else clip_config.named(self.random)


def points(smoke: bool) -> list[Point]:
  if smoke:
    b32 = l14 = "tiny"
    t5 = T5Config.v1_1(64, 2, 512)
    sizes, names = (8,), ("tiny", "tiny-L")  # one batch per row group: compiling dominates a CPU smoke run
  else:
    b32, l14, t5 = "ViT-B-32-quickgelu", "ViT-L-14-quickgelu", T5_LARGE
    sizes, names = (256, 800), ("ViT-B/32", "ViT-L/14")
  rows = [Point(kind, names[0], b32, b) for kind in ("clic", "clic_clip") for b in sizes]
  rows += [Point("read", names[0] + " + T5 v1.1-large" * (not smoke), b32, b, t5) for b in sizes]
  rows += [Point("clic", names[1], l14, b) for b in sizes]
  return rows


# ------------------------------------------------------------------------------------------------ model and state
METHOD_OF = {"clic": "clic", "clic_clip": "clic", "read": "read"}  # the method whose recipe a row's kind runs


def point_config(p: Point, compute_dtype, frozen_dtype, attention: str, remat: bool):
  """The training config of a row: its method's config and recipe (configs/<method>.py), a random model, the row's
  batch, dtypes, attention and remat, READ's decoder at the row's size."""
  c = recipes.load(METHOD_OF[p.kind]).get_config()
  c.model.random, c.data.image_size, c.batch_size = p.random, p.cfg.vision.image_size, p.batch
  c.model.compute_dtype, c.model.frozen_dtype = jnp.dtype(compute_dtype).name, jnp.dtype(frozen_dtype).name
  c.model.attention, c.model.remat_text = attention, remat
  if p.t5 is not None:
    c.read.t5.random, c.read.t5.random_d_model = True, p.t5.d_model
    c.read.t5.random_layers, c.read.t5.random_vocab = p.t5.num_decoder_layers, p.t5.vocab_size
  return c


def step_of(p: Point, compute_dtype, frozen_dtype, attention: str, remat: bool, mesh, abstract: bool):
  """(jitted step of p.kind, its state.State): built by train/state.py exactly as training builds them."""
  c = point_config(p, compute_dtype, frozen_dtype, attention, remat)
  method = methods.get(c.method)
  model = state.build_model(c, method, shapes_only=abstract)
  st = state.build_state(c, model, mesh, 1000, abstract=abstract)
  return state.jit_steps(c, method, model, st, mesh)[p.kind], st


def host_batch(p: Point, rng: np.random.Generator) -> dict:
  """Random global batch of kind p.kind (the shapes the data pipeline emits), numpy on the host."""
  b, size, vocab = p.batch, p.cfg.vision.image_size, p.cfg.text.vocab_size
  k = {"clic": 5, "clic_clip": 1, "read": 4}[p.kind]

  def ids(*shape):  # EOT (the largest id) last: argmax pooling reads position L-1, the full-width case
    x = rng.integers(1, vocab - 1, (*shape, TEXT_LEN), dtype=np.int32)
    x[..., -1] = vocab - 1
    return x

  out = {"image": rng.integers(0, 256, (b, size, size, 3), dtype=np.uint8), "ids": ids(b, k)}
  if p.kind == "clic":
    out["neg_valid"] = np.ones((b,), bool)
  if p.kind == "read":
    out["neg_valid"] = np.ones((b, 3), bool)
    out["para_ids"] = ids(b)
    target = rng.integers(2, p.t5.vocab_size, (b, TEXT_LEN), dtype=np.int32)
    target[:, -1] = p.t5.eos_token_id
    out["t5_target"] = target
    out["t5_input"] = np.concatenate([np.zeros((b, 1), np.int32), target[:, :-1]], axis=1)
  return out


def device_memory() -> int | None:
  try:
    return (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
  except Exception:  # pylint: disable=broad-except  # CPU and some plugins have no memory stats
    return None


def compile_point(p: Point, compute_dtype, frozen_dtype, attention: str, remat: bool, mesh):
  """(compiled step, state, frozen, flops, peak bytes, compile seconds) of point p (AOT lower + compile)."""
  step, st = step_of(p, compute_dtype, frozen_dtype, attention, remat, mesh, abstract=False)
  abstract_batch = {
      k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in host_batch(p, np.random.default_rng(0)).items()
  }
  t0 = time.perf_counter()
  compiled = step.lower(st.state, st.frozen, abstract_batch).compile()
  seconds = time.perf_counter() - t0
  return compiled, st.state, st.frozen, steps.compiled_flops(compiled), steps.compiled_peak_bytes(compiled), seconds


def time_point(compiled, state, frozen, p: Point, mesh, n_steps: int, warmup: int) -> float:
  """Median seconds per step over n_steps timed steps after `warmup`; batches are on the devices beforehand."""
  rng = np.random.default_rng(1)
  batches = [jax.device_put(host_batch(p, rng), sharding.batch_sharding(mesh)) for _ in range(2)]
  times = []
  for i in range(warmup + n_steps):
    t0 = time.perf_counter()
    state, metrics = compiled(state, frozen, batches[i % 2])
    jax.block_until_ready((state, metrics))
    if i >= warmup:
      times.append(time.perf_counter() - t0)
  loss = float(metrics["loss"])
  if not np.isfinite(loss):
    raise FloatingPointError(f"{p.kind} {p.model} B={p.batch}: non-finite loss {loss}")
  return statistics.median(times)


def _fmt(x, spec: str) -> str:
  return "" if x is None else format(x, spec)


def benchmark(smoke: bool = False, n_steps: int = 5, warmup: int = 2, budget_s: float = 420.0, dtype: str = "bfloat16",
              attention: str = "auto", only: Sequence[str] = (), out=sys.stdout) -> list[dict]:
  """Runs every point (or those whose step kind is in `only`) and prints the Markdown table; returns its rows."""
  start = time.perf_counter()
  compute = jnp.dtype(dtype)
  frozen_dtype = jnp.dtype(jnp.bfloat16) if compute == jnp.bfloat16 else compute
  dev = jax.devices()[0]
  peak = peak_flops(dev.device_kind)
  limit = device_memory()
  mesh = sharding.make_mesh(data=-1, fsdp=1)
  n_dev = jax.device_count()
  print(
      f"device benchmark: {n_dev} × {dev.device_kind} ({dev.platform}), jax {jax.__version__}, compute {dtype}, "
      f"frozen towers {frozen_dtype.name}, trained parameters and AdamW state fp32, attention {attention}, "
      f"{TEXT_LEN}-token texts; median of {n_steps} steps after {warmup} warm-up; peak "
      f"{'%.0f TFLOP/s' % (peak / 1e12) if peak else 'unknown (no MFU)'}; device memory "
      f"{'%.1f GiB' % (limit / 2**30) if limit else 'unknown'}", file=out, flush=True)
  rows = []
  for p in points(smoke):
    if only and p.kind not in only:
      continue
    row = {"step": p.kind, "model": p.model, "global batch": p.batch}
    notes = []
    if time.perf_counter() - start > budget_s:
      rows.append({**row, "notes": f"skipped: time budget {budget_s:.0f} s spent"})
      continue
    remat, attn = False, attention
    batch = max(n_dev, p.batch // n_dev * n_dev)  # the batch is split over every device
    while True:
      q = dataclasses.replace(p, batch=batch)
      try:
        compiled, state, frozen, flops, peak_b, t_compile = compile_point(q, compute, frozen_dtype, attn, remat, mesh)
      except Exception as e:  # pylint: disable=broad-except  # e.g. cuDNN refusing a shape: fall back to XLA
        if attn in ("auto", "cudnn"):
          notes.append(f"attention {attn} failed to compile ({type(e).__name__}), XLA used")
          attn = "xla"
          continue
        raise
      if limit and peak_b and peak_b > limit:
        if not remat:
          notes.append(f"{peak_b / 2**30:.0f} GiB > memory: text remat")
          remat = True
          continue
        if batch >= 2 * n_dev:
          notes.append(f"B={batch} does not fit")
          batch //= 2
          continue
      break
    row["global batch"] = batch
    if batch != p.batch or remat:
      notes.append(f"remat={remat}")
    try:
      t = time_point(compiled, state, frozen, q, mesh, n_steps, warmup)
    except Exception as e:  # pylint: disable=broad-except  # an OOM at run time: report it, keep the other rows
      rows.append({**row, "compile (s)": f"{t_compile:.1f}", "notes": "; ".join(notes + [f"failed: {e!r}"[:200]])})
      continue
    finally:
      del state, frozen
    # cost_analysis describes the per-device program (the SPMD partition), so MFU divides by one device's peak
    rows.append({
        **row, "samples/s": f"{batch / t:,.0f}" if not smoke else f"{batch / t:,.1f}",
        "step time (ms)": f"{1e3 * t:,.1f}", "TFLOP/step": _fmt(flops and flops / 1e12, ".4g"),
        "MFU": f"{100 * flops / t / peak:.1f} %" if (flops and peak) else "",
        "peak mem/device (GiB)": _fmt(peak_b and peak_b / 2 ** 30, ".2f"), "compile (s)": f"{t_compile:.1f}",
        "notes": "; ".join(notes)
    })
    print(
        f"  done {p.kind} {p.model} B={batch}: {1e3 * t:.1f} ms/step ({time.perf_counter() - start:.0f} s "
        "elapsed)", file=out, flush=True)
  print(markdown_table(rows), file=out, flush=True)
  print(f"total {time.perf_counter() - start:.0f} s", file=out, flush=True)
  return rows


def memory(model: str = "ViT-L-14-quickgelu", batch: int = 800, fsdp: int = -1, compute_dtype: str = "bfloat16",
           remat: bool = False, attention: str = "xla", out=sys.stdout) -> dict:
  """Compiled peak bytes per device of the CLIC step of `model` at global `batch` with the parameters (trained, AdamW
  moments and frozen) FSDP-sharded over all devices (sharding.state_shardings' size rule), the batch over all too.

  AOT only (abstract arguments, nothing allocated): on a CPU host run it with
  XLA_FLAGS=--xla_force_host_platform_device_count=8 for the fake 8-device mesh (docs/performance.md).
  """
  compute = jnp.dtype(compute_dtype)
  frozen_dtype = jnp.dtype(jnp.bfloat16) if compute == jnp.bfloat16 else compute
  p = Point("clic", model, model, batch)
  mesh = sharding.make_mesh(data=1, fsdp=fsdp)
  step, st = step_of(p, compute, frozen_dtype, attention, remat, mesh, abstract=True)
  batch_sh = sharding.batch_sharding(mesh)
  abstract_batch = {
      k: jax.ShapeDtypeStruct((batch, *v.shape[1:]), v.dtype, sharding=batch_sh)
      for k, v in host_batch(dataclasses.replace(p, batch=2), np.random.default_rng(0)).items()
  }
  t0 = time.perf_counter()
  compiled = step.lower(st.state, st.frozen, abstract_batch).compile()
  peak_b = steps.compiled_peak_bytes(compiled)
  result = {
      "model": model, "global batch": batch, "devices": jax.device_count(), "mesh": dict(mesh.shape),
      "peak bytes/device": peak_b, "compile s": time.perf_counter() - t0, "flops/device": steps.compiled_flops(compiled)
  }
  print(
      f"memory: CLIC step {model}, global batch {batch}, FSDP over {jax.device_count()} "
      f"{jax.devices()[0].platform} devices, compute {compute_dtype}, remat {remat}: compiled peak "
      f"{_fmt(peak_b and peak_b / 2**30, '.2f')} GiB per device (compiled in {result['compile s']:.0f} s)", file=out,
      flush=True)
  return result


def component_fns(random: str, batch: int, text_len: int = TEXT_LEN, compute_dtype="float32", frozen_dtype="float32",
                  attention: str = "explicit") -> dict[str, Callable[[], object]]:
  """{part: compiled and warmed-up thunk} of the CLIC step's parts, each jitted alone: the frozen vision forward on
  B images, the text forward + backward on the 5B texts, the loss and its gradient on the embeddings, the AdamW
  update, and the whole step (model.random = `random`, built by train/state.py)."""
  p = Point("clic", "", random, batch)
  compute, frozen_dt = jnp.dtype(compute_dtype), jnp.dtype(frozen_dtype)
  step, st = step_of(p, compute, frozen_dt, attention, False, sharding.make_mesh(data=-1, fsdp=1), abstract=False)
  graphdef, trainable, frozen, tx, opt_state = st.graphdef, st.state.trainable, st.frozen, st.tx, st.state.opt_state
  hb = host_batch(p, np.random.default_rng(0))
  hb["ids"] = hb["ids"][..., -text_len:]  # keep EOT last: the pooled position is the last one at any width
  norm = (clip_config.OPENAI_MEAN, clip_config.OPENAI_STD)
  state_ = st.state
  merged = lambda tr: nnx.merge(graphdef, tr, frozen)
  from compclip_jax.methods.clic import losses  # pylint: disable=import-outside-toplevel
  from compclip_jax.methods import base  # pylint: disable=import-outside-toplevel

  vision = jax.jit(lambda tr, px: merged(tr).encode_image(base.normalize_images(px, *norm), normalize=True))
  texts = base.stacked(jnp.asarray(hb["ids"]))
  d = p.cfg.embed_dim
  cot = jnp.asarray(np.random.default_rng(1).standard_normal((texts.shape[0], d)), jnp.float32)
  text_fb = jax.jit(jax.value_and_grad(lambda tr: jnp.sum(merged(tr).encode_text(texts, normalize=True) * cot)))
  img = jax.block_until_ready(vision(trainable, hb["image"]))
  txt = merged(trainable).encode_text(texts, normalize=True)
  scale = jnp.float32(1 / 0.07)
  loss = jax.jit(
      jax.value_and_grad(lambda i, t: losses.clic_loss(i, t, jnp.asarray(hb["neg_valid"]), scale)[0], argnums=(0, 1)))
  grads = jax.tree.map(jnp.ones_like, trainable)
  adamw = jax.jit(lambda g, o, pr: optax.apply_updates(pr, tx.update(g, o, pr)[0]))
  parts = {
      "vision forward (frozen)": lambda: vision(trainable, hb["image"]),
      f"text forward + backward ({texts.shape[0]} × {text_len})": lambda: text_fb(trainable),
      "loss + gradient": lambda: loss(img, txt), "AdamW update": lambda: adamw(grads, opt_state, trainable),
      "whole CLIC step": lambda: step(jax.tree.map(jnp.copy, state_), frozen, hb)
  }
  for fn in parts.values():
    jax.block_until_ready(fn())  # compile + warm up
  return parts


def round_robin(parts: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
  """Median seconds of each thunk, run one after the other `runs` times over, so machine noise hits all alike."""
  times = {k: [] for k in parts}
  for _ in range(runs):
    for name, fn in parts.items():
      t0 = time.perf_counter()
      jax.block_until_ready(fn())
      times[name].append(time.perf_counter() - t0)
  return {k: statistics.median(v) for k, v in times.items()}


def components(random: str, batch: int, text_len: int = TEXT_LEN, compute_dtype="float32", frozen_dtype="float32",
               attention: str = "explicit", runs: int = 7, out=sys.stdout) -> dict:
  """Median seconds of the CLIC step and of its parts (component_fns), timed round-robin (docs/performance.md,
  "CPU profile"). The parts add up to more than the step: XLA fuses across them."""
  med = round_robin(component_fns(random, batch, text_len, compute_dtype, frozen_dtype, attention), runs)
  print(
      f"CLIC step components, B={batch}, {text_len} tokens, compute {compute_dtype}, frozen {frozen_dtype}, "
      f"attention {attention}, {jax.devices()[0].platform}; median of {runs} round-robin runs:", file=out)
  for k, v in med.items():
    print(f"  {k:34s} {v:8.3f} s", file=out, flush=True)
  return med


def markdown_table(rows: list[dict]) -> str:
  lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
  lines += ["| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |" for r in rows]
  return "\n".join(lines)


def _define_flags():
  """The command's flags (defined when it runs, not on import: bench.py imports this module)."""
  f = flags
  return dict(smoke=f.DEFINE_bool("smoke", False, "tiny widths and batches (seconds on a CPU)"),
              steps=f.DEFINE_integer("steps", 5, "timed steps per row (median reported)"),
              warmup=f.DEFINE_integer("warmup", 2, "untimed steps after compilation"),
              budget_s=f.DEFINE_float("budget_s", 420.0, "rows not started by then are skipped"),
              dtype=f.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"], "compute dtype, both towers"),
              attention=f.DEFINE_enum("attention", "auto", ["explicit", "xla", "cudnn", "auto"], "attention"),
              only=f.DEFINE_list("only", [], "step kinds (clic, clic_clip, read)"),
              memory=f.DEFINE_bool("memory", False, "instead: AOT peak memory of the FSDP ViT-L/14 CLIC step"),
              memory_model=f.DEFINE_string("memory_model", "ViT-L-14-quickgelu", "--memory: the model"),
              memory_batch=f.DEFINE_integer("memory_batch", 800, "--memory: the global batch"),
              remat=f.DEFINE_bool("remat", False, "--memory: rematerialise the text tower"))


def main(argv, fl: dict) -> None:
  cli.refuse_arguments(argv)
  v = {k: f.value for k, f in fl.items()}
  if v["memory"]:
    memory(v["memory_model"], v["memory_batch"], compute_dtype=v["dtype"], remat=v["remat"])
    return
  benchmark(v["smoke"], v["steps"], v["warmup"], v["budget_s"], v["dtype"], v["attention"], tuple(v["only"]))


def run(argv: Sequence[str] | None = None) -> None:
  fl = _define_flags()
  cli.run(lambda a: main(a, fl), argv=list(argv) if argv is not None else None)


if __name__ == "__main__":
  run()
