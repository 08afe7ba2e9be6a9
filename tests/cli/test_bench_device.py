"""The prepared device benchmark (compclip_jax/bench/device.py): --smoke runs on this CPU and prints the table the
accelerator run will print; it imports none of the dependencies that do not travel to the accelerator machine."""
import io
import subprocess
import sys

import pytest

from compclip_jax.bench import device as bench_device


@pytest.fixture(scope="module")
def smoke():
  buf = io.StringIO()
  rows = bench_device.benchmark(smoke=True, n_steps=2, warmup=1, out=buf)
  return rows, buf.getvalue()


def _num(cell: str) -> float:
  return float(cell.replace(",", ""))


def _table(text: str) -> list[list[str]]:
  lines = [line for line in text.splitlines() if line.startswith("|")]
  return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


@pytest.mark.slow
def test_smoke_prints_one_row_per_point_with_every_column(smoke):
  rows, text = smoke
  table = _table(text)
  assert table[0] == list(bench_device.COLUMNS)
  assert set("".join(table[1])) <= set("-")  # the Markdown separator
  body = table[2:]
  want = [(p.kind, p.model, str(p.batch)) for p in bench_device.points(smoke=True)]
  assert [tuple(r[:3]) for r in body] == want == [("clic", "tiny", "8"), ("clic_clip", "tiny", "8"),
                                                  ("read", "tiny", "8"), ("clic", "tiny-L", "8")]
  col = {c: i for i, c in enumerate(bench_device.COLUMNS)}
  for r in body:
    assert len(r) == len(bench_device.COLUMNS)
    batch, rate, ms = int(r[col["global batch"]]), _num(r[col["samples/s"]]), _num(r[col["step time (ms)"]])
    assert ms > 0 and rate == pytest.approx(batch / (ms / 1e3), rel=0.02)  # samples/s is the batch over step time
    assert float(r[col["TFLOP/step"]]) >= 0 and float(r[col["peak mem/device (GiB)"]]) > 0
    assert r[col["MFU"]] == ""  # a CPU has no entry in the peak table
    assert not r[col["notes"]]
  assert len(rows) == len(body)


@pytest.mark.slow
def test_the_clic_step_costs_more_flops_than_clics_clip_step(smoke):
  """XLA's cost analysis is what MFU divides: the CLIC step encodes 5 texts per image, the CLIP step 1 (both share
  the fixed costs — the frozen vision forward, AdamW over the tiny model's 3.2M-element token embedding — so the
  ratio is well under 5: 1.93 measured)."""
  _, text = smoke
  col = {c: i for i, c in enumerate(bench_device.COLUMNS)}
  flops = {(r[0], r[1]): float(r[col["TFLOP/step"]]) for r in _table(text)[2:]}
  assert flops[("clic", "tiny")] > 1.5 * flops[("clic_clip", "tiny")] > 0


def test_peak_table_by_device_kind():
  assert bench_device.peak_flops("NVIDIA H200") == 989e12
  assert bench_device.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
  assert bench_device.peak_flops("NVIDIA A100-SXM4-40GB") == 312e12
  assert bench_device.peak_flops("TPU v4") == 275e12
  assert bench_device.peak_flops("TPU v5 lite") == 197e12
  assert bench_device.peak_flops("TPU v5p") == 459e12
  assert bench_device.peak_flops("TPU v6 lite") == 918e12
  assert bench_device.peak_flops("cpu") is None


def test_real_points_are_the_issue_s_shapes():
  pts = bench_device.points(smoke=False)
  assert [(p.kind, p.batch) for p in pts] == [("clic", 256), ("clic", 800), ("clic_clip", 256), ("clic_clip", 800),
                                              ("read", 256), ("read", 800), ("clic", 256), ("clic", 800)]
  t5 = pts[4].t5
  assert (t5.d_model, t5.num_decoder_layers, t5.vocab_size, t5.d_ff, t5.num_heads, t5.d_kv) == (1024, 24, 32128, 2816,
                                                                                                16, 64)
  assert pts[0].cfg.vision.patch_size == 32 and pts[-1].cfg.vision.patch_size == 14
  assert pts[-1].cfg.vision.width == 1024 and pts[-1].cfg.text.width == 768


def test_imports_nothing_that_does_not_travel():
  code = ("import sys, compclip_jax.bench.device; "
          "bad = [m for m in ('spacy', 'grain', 'orbax', 'transformers', 'torch', 'tokenizers', 'sentencepiece') "
          "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stdout + r.stderr


def test_precision_policy_bf16_compute_keeps_fp32_state_and_a_close_loss():
  """bf16 compute in both towers (frozen vision stored bf16), fp32 trained parameters, AdamW moments and loss: the
  CLIC step runs and its loss is within bf16 tolerance of the fp32 step's on the same tiny weights."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from compclip_jax import sharding

  p = bench_device.Point("clic", "tiny", "tiny", 8)
  batch = bench_device.host_batch(p, np.random.default_rng(0))
  out = {}
  mesh = sharding.make_mesh(data=-1, fsdp=1)
  for dtype in (jnp.float32, jnp.bfloat16):
    # the step training builds (train/state.py), from CLIC's config at these dtypes
    step, st = bench_device.step_of(p, dtype, dtype, "explicit", False, mesh, abstract=False)
    frozen = st.frozen
    from flax import nnx
    model = nnx.merge(st.graphdef, st.state.trainable, frozen)  # both towers compute in `dtype`
    assert model.text_model(batch["ids"][:, 0]).dtype == dtype
    assert model.vision_model(batch["image"].astype(np.float32)).dtype == dtype
    new, metrics = step(st.state, frozen, batch)
    out[dtype] = metrics
    assert metrics["loss"].dtype == jnp.float32
    floats = lambda tree: [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
    assert {x.dtype for x in floats((new.trainable, new.opt_state))} == {jnp.dtype(jnp.float32)}
    assert {x.dtype for x in floats(frozen)} == {jnp.dtype(dtype)}
    assert np.isfinite(float(metrics["grad_norm"])) and float(metrics["grad_norm"]) > 0
  l32, l16 = float(out[jnp.float32]["loss"]), float(out[jnp.bfloat16]["loss"])
  assert l16 != l32  # the bf16 path really computed in bf16
  assert abs(l16 - l32) <= 2e-2 * abs(l32), (l16, l32)
