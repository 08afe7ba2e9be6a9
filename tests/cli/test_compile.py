"""The TPU compile check (compclip_jax/cli/compile.py, train/aot.py) on libtpu's compile-only devices: every step kind
of a tiny config compiles for v5e:2x2 and v4:2x2x2 with the trainer's own state, fits, and XLA:TPU counts the same
FLOPs as XLA:CPU; slice names resolve; the HLO collective counter reads a hand-written module; user mistakes are one
line. Skipped where libtpu is absent (requirements-tpu-compile.txt; CI installs it)."""
import json
import os
import subprocess
import sys

import jax
import pytest

from compclip_jax.models import clip_config
from compclip_jax.train import tpus as tpu
from compclip_jax.errors import UserError
from compclip_jax.train import aot
from configs import clic_read, negclip
from tests import paths

try:
  import libtpu  # noqa: F401  pylint: disable=unused-import
  HAVE_LIBTPU = True
except ImportError:
  HAVE_LIBTPU = False
needs_libtpu = pytest.mark.skipif(not HAVE_LIBTPU, reason=f"no TPU compiler here: {tpu.INSTALL}")
ENV = {**os.environ, "PYTHONPATH": paths.ROOT}


def test_slice_names_resolve_to_topologies():
  assert tpu.resolve("v5e-8")[0] == "v5e:2x4" and tpu.resolve("v5e-256")[0] == "v5e:16x16"
  assert tpu.resolve("v4-8")[:3:2] == ("v4:2x2x1", 4) and tpu.resolve("v4-32")[0] == "v4:2x2x4"
  assert tpu.resolve("v5p-128")[0] == "v5p:4x4x4" and tpu.resolve("v6e-8")[0] == "v6e:2x4"
  assert tpu.resolve("v5e:4x4")[2] == 16 and tpu.resolve("v2-8")[0] == "v2:2x2"
  assert tpu.resolve("tpu7x:2x2x2")[::2] == ("tpu7x:2x2x2", 8)
  for bad in ("v9-8", "v5e-12", "tpu", "tpu7x-8"):
    with pytest.raises(UserError):
      tpu.resolve(bad)


@needs_libtpu
def test_devices_are_what_a_vm_of_the_slice_lists():
  """A v4 or v5p chip is one megacore device (two TensorCores, the chip's HBM), as `jax.devices()` lists it on the
  VM; a v5e chip one device of one core; a tpu7x chip two devices of one core and half its HBM each."""
  for topology, devices, cores, gib in (("v4:2x2x1", 4, 2, 32), ("v5p:2x2x1", 4, 2, 95), ("v5e:2x2", 4, 1, 16),
                                        ("tpu7x:2x2x1", 8, 1, 96)):
    found = tpu.compile_only_devices(topology)
    chip = tpu.chip_of(found[0])
    assert (len(found), found[0].num_cores) == (devices, cores), (topology, found[0])
    assert tpu.device_hbm_bytes(chip, found[0]) == gib * 2 ** 30, topology


def test_collectives_are_counted_with_their_bytes():
  hlo = """
  %ag = bf16[8,512]{1,0} all-gather(bf16[2,512]{1,0} %p), replica_groups={{0,1,2,3}}, dimensions={0}
  %ars = (f32[16]{0}, f32[4]{0}) all-reduce-start(f32[16]{0} %a, f32[4]{0} %b), to_apply=%add
  %ard = (f32[16]{0}, f32[4]{0}) all-reduce-done((f32[16]{0}, f32[4]{0}) %ars)
  %cp = s32[3]{0} collective-permute(s32[3]{0} %x), source_target_pairs={{0,1}}
  %rs = f32[2,8]{1,0} reduce-scatter(f32[8,8]{1,0} %y), dimensions={0}
  %g = (f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}, f32[4]{0}, /*index=5*/f32[8]{0}) all-reduce(%a, %b), to_apply=%add
  """
  assert aot.collectives(hlo) == {
      "all-gather": {"count": 1, "bytes": 8 * 512 * 2},
      "all-reduce": {"count": 2, "bytes": 16 * 4 + 4 * 4 + 5 * 16 + 32},
      "collective-permute": {"count": 1, "bytes": 12}, "reduce-scatter": {"count": 1, "bytes": 64}
  }


def test_one_collective_split_by_async_collective_fusion_is_counted_once():
  """libtpu fuses pieces of one all-gather into the compute it overlaps: each piece is an `all-gather` line with the
  whole result and the collective's channel id (lines as libtpu writes them, shortened)."""
  hlo = """
  %all-gather.7 = bf16[4096,256]{1,0:T(8,128)(2,1)} all-gather(%param_0.1), channel_id=2, dimensions={0}
  %all-gather.8 = bf16[4096,256]{1,0:T(8,128)(2,1)S(1)} all-gather(%param_0.2), channel_id=2, dimensions={0}
  %all-gather.9 = bf16[4096,256]{1,0:T(8,128)(2,1)S(1)} all-gather(%param_0.3), channel_id=2, dimensions={0}
  %all-gather.10 = f32[8,32]{1,0} all-gather(%param_0.4), channel_id=5, dimensions={0}
  """
  assert aot.collectives(hlo) == {"all-gather": {"count": 2, "bytes": 4096 * 256 * 2 + 8 * 32 * 4}}


@pytest.mark.slow  # a TPU compile, 2 s
@needs_libtpu
def test_the_tpu_compilers_split_gather_is_one_all_gather():
  """One all-gather that libtpu overlaps with independent work (a chain of local matmuls) and so splits into
  pieces: counted once, with its bytes, as the program holds one gather of x."""
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec

  sh = NamedSharding(Mesh(np.array(tpu.compile_only_devices("v5e:2x2")), ("data",)), PartitionSpec("data"))

  def f(x, w):
    for _ in range(8):  # local work the gather of x overlaps
      w = jnp.tanh(w @ jnp.eye(256) * 1.01)
    return jax.nn.logsumexp(w @ x.T, -1).sum()  # every row of x

  x = jax.ShapeDtypeStruct((4096, 256), jnp.float32)
  hlo = jax.jit(f, in_shardings=(sh, sh)).lower(x, x).compile().as_text()
  assert hlo.count(" all-gather(") > 1  # the pieces this counts once (6 with libtpu 0.0.42.1)
  assert aot.collectives(hlo)["all-gather"] == {"count": 1, "bytes": 4096 * 256 * 2}  # x, gathered in bf16


def test_traffic_between_slices_is_counted_as_dcn():
  """Multi-slice: XLA compiles one slice's program, and what crosses to the other slice is a send to the megascale
  runtime (lines as libtpu writes them, shortened); its receives and the in-slice collectives are not DCN traffic."""
  meg = 'is_host_transfer=true, frontend_attributes={_xla_host_transfer_handler_name="xla_megascale_runtime",'
  hlo = f"""
  %send.2 = (f32[1,1,2,32]{{3,2,1,0}}, u32[], token[]) send(%b, %aa), {meg}_xla_megascale_transfer_type="ALL_REDUCE"}}
  %recv.2 = (f32[1,1,2,32]{{3,2,1,0}}, u32[], token[]) recv(%aa), {meg}_xla_megascale_transfer_type="ALL_REDUCE"}}
  %send.4 = (f32[1,32]{{1,0}}, u32[], token[]) send(%s, %ab), {meg}_xla_megascale_transfer_type="ONE_TO_ONE"}}
  %ar = f32[16]{{0}} all-reduce(f32[16]{{0}} %p), replica_groups={{{{0,1,2,3}}}}, to_apply=%add
  """
  assert aot.collectives(hlo) == {
      "dcn-all-reduce": {"count": 1, "bytes": 2 * 32 * 4 + 4}, "dcn-one-to-one": {"count": 1, "bytes": 32 * 4 + 4},
      "all-reduce": {"count": 1, "bytes": 64}
  }


def _tiny(module, **kw):
  c = module.get_config("runlocal")
  for k, v in kw.items():
    *path, leaf = k.split(".")
    target = c
    for p in path:
      target = target[p]
    target[leaf] = v
  return c


@pytest.mark.slow  # a TPU compile takes 10–45 s on 2 cores
@needs_libtpu
@pytest.mark.parametrize("topology", ["v5e:2x2", "v4:2x2x2"])
def test_every_step_kind_compiles_for_the_tpu_and_fits(topology):
  """clic_read (its CLIC+READ step and CLIC's CLIP step: the decoder, W, alternation) with FSDP over every device."""
  devices = tpu.compile_only_devices(topology)
  c = _tiny(clic_read, **{"mesh.data": 1, "mesh.fsdp": -1, "batch_size": len(devices)})
  reports = aot.compile_steps(c, devices)
  assert set(reports) == {"clic_read", "clic_clip", "eval_text", "eval_image"}  # + the evaluation encoders
  cap = tpu.device_hbm_bytes(tpu.resolve(topology)[1], devices[0])
  assert len(devices) == (4 if topology.startswith("v5e") else 8)  # a v4 chip: one megacore device, as on the VM
  assert cap == (16 if topology.startswith("v5e") else 32) * 2 ** 30  # a chip's HBM: v5e 16 GiB, v4 32
  for name, r in reports.items():
    assert not r.error and 0 < r.hbm_bytes < cap and r.flops > 0 and r.bytes_accessed > 0, name
    assert r.temp_bytes > 0 or name.startswith("eval_"), name  # a tiny encoder may fuse into no temporaries (v4)
    assert "all-gather" in r.collectives  # FSDP gathers the sharded parameters
  assert reports["clic_read"].batch == len(devices) and reports["eval_text"].batch == c.evals.batch_size


@pytest.mark.slow  # a TPU compile takes 10–45 s on 2 cores
@needs_libtpu
def test_tpu_and_cpu_compilers_count_the_same_flops():
  """The same step (NegCLIP, data-parallel) for 4 TPU v5e chips and for 4 of this host's CPU devices: the programs
  differ (layouts, fusions), the FLOPs of the maths do not (within 10 %). In bf16 the gradient is reduced in fp32."""
  c = _tiny(negclip)
  on_tpu = aot.compile_steps(c, tpu.compile_only_devices("v5e:2x2"), encoders=False)["negclip"]
  on_cpu = aot.compile_steps(c, jax.devices()[:4], encoders=False)["negclip"]
  assert on_cpu.flops > 0 and abs(on_tpu.flops / on_cpu.flops - 1) < 0.10, (on_tpu.flops, on_cpu.flops)
  # bf16 mixed precision (the recipes'): the gradient is still all-reduced in fp32 — the same bytes as the fp32
  # step's (a bf16 reduction would move half of them)
  mixed = _tiny(negclip, **{"model.compute_dtype": "bfloat16"})
  in_bf16 = aot.compile_steps(mixed, tpu.compile_only_devices("v5e:2x2"), encoders=False)["negclip"]
  grads = lambda r: r.collectives["all-reduce"]["bytes"]
  assert grads(in_bf16) == grads(on_tpu) > 4 * 1_000_000, (grads(in_bf16), grads(on_tpu))


def _cli(*args):
  return subprocess.run([sys.executable, "-m", "compclip_jax", "compile", *args], cwd=paths.ROOT, env=ENV,
                        capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # a TPU compile takes 10–45 s on 2 cores
@needs_libtpu
def test_the_command_prints_a_row_per_step_and_writes_json(tmp_path):
  """--only: the programs named, no others (every program of a config: the in-process test above)."""
  out = _cli("--config=configs/clic.py:runlocal", "--topology=v5e-4", "--only=clic_clip,eval_text",
             f"--output={tmp_path / 'c.json'}")
  assert out.returncode == 0, out.stderr[-2000:]
  rows = [l for l in out.stdout.splitlines() if l.startswith("| clic_clip") or l.startswith("| eval_text")]
  assert len(rows) == 2 and all("| yes (" in r for r in rows), out.stdout
  got = json.loads((tmp_path / "c.json").read_text())
  assert got["topology"] == "v5e:2x2" and got["chips"] == 4
  assert (got["compute_dtype"], got["attention"]) == ("float32", "explicit")  # what :runlocal compiles
  assert set(got["steps"]) == {"clic_clip", "eval_text"}
  for s in got["steps"].values():
    assert s["fits"] and 0 < s["hbm_bytes_per_chip"] < s["hbm_capacity_bytes"] and s["flops_per_chip"] > 0


def test_mistakes_are_one_line(tmp_path):
  for args, says in ((["--config=configs/clic.py:runlocal", "--topology=v7-8"], "--topology=v7-8"),
                     (["--config=configs/clic.py:runlocal", "--topology=v5e-4",
                       "--config.batch_size=6"], "not divisible by the 4 devices"),
                     (["--config=configs/clic.py:runlocal", "--topology=v5e-4",
                       "--only=clic,eval"], "eval is no program of this config; it has clic, clic_clip, eval_text")):
    if "v5e-4" in args[1] and not HAVE_LIBTPU:
      says = "libtpu is not installed"
    out = _cli(*args)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr[-1500:]


def _text_grad_temp_bytes(device, remat: bool, policy: str = "full", scan: bool = False) -> int:
  """Temporaries of the text tower's gradient (4 blocks, width 64, 256 captions × 32 tokens) compiled by XLA:TPU for
  one compile-only device: enough for the policies to differ (v5p: 48 < 79 < 124 MB; 3 blocks or 16 tokens leave
  full remat above half of none) in about two thirds of a v5e compile's CPU time (v5e: 0 < 17.9 < 25.2 MB)."""
  return _grad_temp_bytes(device, "text", dict(remat_text=remat, remat_policy=policy, scan_layers=scan))


def _grad_temp_bytes(device, tower: str, options: dict) -> int:
  """Temporaries of one tower's gradient compiled by XLA:TPU for one compile-only device, the tiny CLIP built with
  `options`: the text tower (4 blocks) on 256 captions × 32 tokens, every parameter's gradient; or the vision tower
  (6 blocks, 32 px: 16 patches) on 256 images, the vision tower's parameters' gradient only (the text tower's zero
  gradients would be an output buffer XLA uses as scratch: 0 temporaries either way)."""
  import dataclasses
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx
  from compclip_jax.models import clip_config
  from compclip_jax.models.clip import CLIP
  cfg = clip_config.tiny()
  cfg = cfg.replace(text=dataclasses.replace(cfg.text, layers=4),
                    vision=dataclasses.replace(cfg.vision, layers=6, image_size=32))
  model = nnx.eval_shape(lambda: CLIP(cfg, rngs=nnx.Rngs(0), **options))
  wrt = nnx.Param if tower == "text" else nnx.All(nnx.Param, nnx.PathContains("vision_model"))
  gd, p, rest = nnx.split(model, wrt, ...)
  sh = jax.sharding.SingleDeviceSharding(device)
  spec = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh)

  def loss(p, rest, x):
    m = nnx.merge(gd, p, rest)
    return jnp.sum(m.encode_text(x, normalize=True) if tower == "text" else m.encode_image(x, normalize=True))

  x = jax.ShapeDtypeStruct((256, 32), np.int32, sharding=sh) if tower == "text" else \
      jax.ShapeDtypeStruct((256, 32, 32, 3), np.float32, sharding=sh)
  compiled = jax.jit(jax.grad(loss)).lower(jax.tree.map(spec, p), jax.tree.map(spec, rest), x).compile()
  return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.slow  # a TPU compile takes 10–45 s on 2 cores
@needs_libtpu
def test_remat_halves_the_text_towers_temporaries_on_tpu():
  """model.remat_text: XLA:TPU's own buffer assignment keeps at most half the temporaries (full: the blocks' inputs
  only), and the policies order as documented (models/clip.py): full < dots_no_batch < none. (dots_saveable, which
  also keeps the attention scores: docs/tpu.md, not compiled in CI.) On a v5p device: its compiles are the cheapest
  of the generations that keep a temporary for each policy (a v4 keeps more with dots_no_batch than with none)."""
  device = tpu.compile_only_devices("v5p:2x2x1")[0]
  none = _text_grad_temp_bytes(device, remat=False)
  full = _text_grad_temp_bytes(device, remat=True, policy="full")
  dots = _text_grad_temp_bytes(device, remat=True, policy="dots_no_batch")
  assert full <= 0.5 * none and full < dots < none, (full, dots, none)


@pytest.mark.slow  # two TPU compiles, ~15 s each on 2 cores
@needs_libtpu
def test_vision_remat_halves_the_vision_towers_temporaries_on_tpu():
  """model.remat_vision (for READ, which trains the vision tower): XLA:TPU keeps at most half the temporaries of the
  vision tower's gradient (v5p: 53 against 160 MB; 3 blocks keep 45 against 55)."""
  device = tpu.compile_only_devices("v5p:2x2x1")[0]
  none = _grad_temp_bytes(device, "vision", {})
  full = _grad_temp_bytes(device, "vision", dict(remat_vision=True))
  assert full <= 0.5 * none, (full, none)


def test_find_batch_returns_the_largest_batch_that_fits(monkeypatch):
  """--find_batch's search (doubling or halving from the config's batch, then bisection), with the compile replaced
  by a known limit: the largest multiple of the devices at or under it, from above and from below, in few compiles;
  0 when not one row per device fits. (Each real probe is a compile_steps call, tested above.)"""
  from compclip_jax.cli import compile as cmd
  for limit, start, want in ((50, 8, 48), (50, 800, 48), (4096, 800, 4096), (3, 8, 0), (8, 8, 8)):
    probes = []
    monkeypatch.setattr(cmd, "_fits", lambda c, d, cap, b, limit=limit: probes.append(b) or b <= limit)
    c = _tiny(negclip, batch_size=start)
    assert cmd.find_batch(c, [None] * 4, 0) == want, (limit, start, probes)
    assert all(b % 4 == 0 and b >= 0 for b in probes) and len(probes) <= 16


@pytest.mark.slow  # three compiles of a tiny step
@needs_libtpu
def test_find_batch_finds_the_batch_the_compiler_says_fits():
  """--find_batch on a tiny negclip over a v5e-4, with an HBM budget of exactly what the compiler says a global batch
  of 4 holds: 4 is the answer — it fits by the compiler's own figure, and one more row per device (8) does not (its
  probe). Its probes: 4, 8; bisection has nothing left between them (one row per device)."""
  from compclip_jax.cli import compile as cmd
  devices = tpu.compile_only_devices("v5e:2x2")
  c = _tiny(negclip, batch_size=4)
  budget = aot.compile_steps(c, devices, encoders=False)["negclip"].hbm_bytes
  assert cmd.find_batch(c, devices, budget) == 4


@needs_libtpu
def test_two_slices_are_one_mesh_of_both_slices_devices():
  """--num_slices=2: the devices of two v5e:2x2 slices (slice_index 0 and 1) form the data axis; the gradients are
  all-reduced within a slice and then with the other slice over the data-center network."""
  devices = tpu.compile_only_devices("v5e:2x2", 2)
  assert len(devices) == 8 and sorted({d.slice_index for d in devices}) == [0, 1]
  r = aot.compile_steps(_tiny(negclip, batch_size=8), devices, encoders=False)["negclip"]
  assert not r.error and r.hbm_bytes > 0 and "all-reduce" in r.collectives
  # one slice's program (its 4 devices) that all-reduces the gradients with the other slice over the DCN
  assert "replica_groups={{0,1,2,3}}" in r.hlo.replace(" ", "") and r.collectives["dcn-all-reduce"]["count"] >= 1


def test_text_len_is_the_training_steps_token_width():
  """--text_len: the steps compiled at a bucket width (their model FLOPs those of 32-token captions, the ids 32 wide
  in the program); wider than the text tower is one line."""
  from compclip_jax.train import flops
  c = _tiny(negclip, batch_size=8)
  with pytest.raises(UserError, match="--text_len=78: the text tower takes at most 77 tokens"):
    aot.compile_steps(c, jax.devices()[:4], encoders=False, text_len=78)
  r = aot.compile_steps(c, jax.devices()[:4], encoders=False, text_len=32)["negclip"]
  assert "s32[2,2,32]" in r.hlo and "s32[2,2,77]" not in r.hlo  # each device's rows of [batch, texts, tokens]
  wide = flops.text_forward(clip_config.tiny().text, clip_config.tiny().embed_dim, 77)
  narrow = flops.text_forward(clip_config.tiny().text, clip_config.tiny().embed_dim, 32)
  assert r.model_flops < 8 * 2 * 3 * wide and r.model_flops > 8 * 2 * 3 * narrow  # 8 rows × 2 texts, trained (×3)


def test_padding_the_token_width_runs_the_text_tower_wider_and_counts_the_batchs_flops():
  """model.pad_tokens_to=16: the full-width batch (77 tokens) runs through the text tower as 80; the model FLOPs are
  still those of the 77-token batch (what MFU divides), the compiler's count grows with the padding."""
  c = _tiny(negclip, batch_size=8)
  wide = _tiny(negclip, batch_size=8, **{"model.pad_tokens_to": 16})
  r, r80 = (aot.compile_steps(x, jax.devices()[:4], encoders=False)["negclip"] for x in (c, wide))
  width = clip_config.tiny().text.width
  assert f"[4,80,{width}]" in r80.hlo and f"[4,80,{width}]" not in r.hlo, "each device's 2 × 2 captions, 80 wide"
  assert r80.model_flops == r.model_flops and r80.flops > r.flops


def test_a_config_mistake_is_the_trainers_one_message():
  """The compile check validates the config as training does (not its data paths: it reads no data)."""
  from compclip_jax.train.trainer import ConfigError
  c = _tiny(negclip, **{"model.remat_policy": "some", "data.source": "csv", "data.path": "/nonexistent.csv"})
  with pytest.raises(ConfigError, match="model.remat_policy 'some'") as e:
    aot.compile_steps(c, jax.devices()[:4])
  assert "nonexistent" not in str(e.value)


@pytest.mark.slow  # a TPU compile takes 10–45 s on 2 cores
@needs_libtpu
def test_clic_on_a_siglip_compiles_for_the_tpu_at_siglips_text_width():
  """CLIC's sigmoid forms (docs/siglip.md) on a tiny SigLIP, data parallel over a v5e-4: the batch at the text
  tower's full width (its context length, not CLIP's 77), and the positives' logits in a form libtpu 0.0.42 compiles
  (read off the [4, B, B] diagonal, they failed a RET_CHECK in its all-reduce-scatter fusion; it takes 128 samples
  per device, a full lane tile, to show)."""
  from configs import clic  # pylint: disable=import-outside-toplevel
  devices = tpu.compile_only_devices("v5e:2x2")
  c = _tiny(clic, **{"model.random": "siglip_tiny", "batch_size": 128 * len(devices), "evals.benchmarks": ()})
  # the CLIC step alone: CLIC's CLIP step on a SigLIP is SigLIP's own loss (tests/models/test_siglip_loss.py
  # compiles its sharded form for the TPU)
  reports = aot.compile_steps(c, devices, encoders=False, only=("clic",))
  assert set(reports) == {"clic"}
  for name, r in reports.items():
    assert not r.error and r.hbm_bytes > 0 and r.flops > 0, (name, r.error)
    assert r.batch == c.batch_size, r.batch


def _attention_grad(attention: str):
  """One attention layer's gradient (width 256, 4 heads of 64 lanes, 128 causal 77-token sequences in bf16,
  data-parallel over a v5e-4) compiled by XLA:TPU with model.attention=`attention`, traced under its mesh as the
  trainer traces its steps (train/steps.under_mesh)."""
  import jax.numpy as jnp
  import numpy as np
  from flax import nnx
  from jax.sharding import Mesh, NamedSharding, PartitionSpec
  from compclip_jax.models.layers import Attention, DTypes
  mesh = Mesh(np.array(tpu.compile_only_devices("v5e:2x2")), ("data",))
  layer = nnx.eval_shape(
      lambda: Attention(256, 4, DTypes(jnp.bfloat16, jnp.float32), rngs=nnx.Rngs(0), attention=attention))
  gd, params = nnx.split(layer)
  replicated = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, PartitionSpec()))

  def loss(params, x):
    return jnp.sum(nnx.merge(gd, params)(x, True).astype(jnp.float32) ** 2)

  x = jax.ShapeDtypeStruct((128, 77, 256), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("data")))
  with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
    lowered = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(jax.tree.map(replicated, params), x)
  r = aot.report(attention, lowered.compile(), 0.0)
  return r.hlo, r.bytes_accessed


@pytest.mark.slow  # two TPU compiles, 2–4 s each
@needs_libtpu
def test_the_pallas_attention_compiles_into_the_tpu_step_and_moves_fewer_bytes():
  """model.attention="pallas" (and "auto", the recipes' value, on a TPU): XLA:TPU compiles the fused kernel
  (models/fused_attention.py) into each device's program, forward and backward, and the gradient moves fewer bytes
  of HBM than with XLA's attention, which writes the [B, H, L, L] scores and probabilities out and reads them back."""
  fused_hlo, fused_bytes = _attention_grad("pallas")
  xla_hlo, xla_bytes = _attention_grad("xla")
  assert fused_hlo.count("custom_call_target=\"tpu_custom_call\"") == 2, "forward and backward kernels"
  assert "tpu_custom_call" not in xla_hlo
  assert fused_bytes < 0.7 * xla_bytes, (fused_bytes, xla_bytes)  # 97 vs 150 MB with libtpu 0.0.42.1
