"""python -m compclip_jax compile: will this config fit that TPU? Every step kind the config runs, compiled on this
host for a TPU topology's compile-only devices (libtpu's compiler; nothing runs, no weights are read beyond the
config's model), with the trainer's own state, rules, optimiser and shardings at the config's global batch.

  python -m compclip_jax compile --config=configs/clic.py --topology=v5e-8 [--config.KEY=VALUE …] [--output=F.json]
  python -m compclip_jax compile --config=configs/read.py --topology=v5e:2x4 --find_batch

Prints one Markdown row per step kind: HBM per device (arguments, outputs, donated aliases, temporaries, code)
against the device's HBM, fits with its margin, the compiler's FLOPs and bytes accessed per device, collectives by
kind with their bytes, a roofline step time (max of FLOPs ÷ peak and bytes ÷ HBM bandwidth: compclip_jax/train/tpus.py
cites the figures), the samples/s and MFU that implies, and the compile time. Needs libtpu
(`pip install -r requirements-tpu-compile.txt`); docs/tpu.md has the measured tables.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys

from absl import flags
from ml_collections import config_flags

from compclip_jax.cli import app as cli
from compclip_jax.cli import config_args
from compclip_jax.train import tpus as tpu

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/<method>.py[:arg]).", lock_config=True)
_TOPOLOGY = flags.DEFINE_string("topology", None, "A slice (v5e-8, v4-8, v5p-128, …) or a topology (v5e:2x4).",
                                required=True)
_SLICES = flags.DEFINE_integer("num_slices", 1, "Slices joined over the data-center network (multi-slice).")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the results as JSON here.")
_FIND = flags.DEFINE_bool("find_batch", False, "Also bisect the largest global batch at which every step fits.")
_ONLY = flags.DEFINE_list("only", [], "Compile only these programs (step kinds, eval_text, eval_image); default all.")
_REQUIRE = flags.DEFINE_bool("require_fit", False, "Exit 1 when a program does not fit (launch/tpu_vm.sh run).")
_HLO = flags.DEFINE_string(
    "hlo", None, "Also write each program's optimised HLO text into this folder "
    "(<program>.hlo.txt: what tools/hlo_traffic.py reads).")
_CHIP_CONFIG = flags.DEFINE_enum(
    "chip_config", "", ["", *tpu.CHIP_CONFIGS], "libtpu's chip configuration; default: the VM's (v4 and v5p: "
    "megacore, one device per chip; else one device per TensorCore). 'default' on a v4: a device per TensorCore.")
_TEXT_LEN = flags.DEFINE_integer(
    "text_len", 0, "The training steps' token width: a bucket the data's captions trim to (data.trim_tokens: "
    "multiples of 16); 0: the text tower's full width (CLIP's 77), the widest batch.")

COLUMNS = ("step", "global batch", "HBM/device GiB (args + out − alias + temp + code)", "device HBM GiB", "fits",
           "TFLOP/device (model; compiler)", "GB accessed/device", "collectives (count, GB)", "roofline ms",
           "samples/s", "MFU", "compile s")


def _gib(x: float) -> str:
  return f"{x / 2 ** 30:.2f}"


def row(r, capacity: int, peak: float, bw: float, per_chip: int = 1, devices: int = 1) -> dict:
  """One table row (and the JSON entry) of a StepReport; `capacity`, `peak`, `bw` per device, `per_chip` devices
  per chip (a tpu7x chip's two TensorCores: 2), `devices` in the program. The row is per device (what must fit);
  the JSON has both. The roofline is the compiler's (max of its FLOPs ÷ peak and its bytes ÷ bandwidth); MFU is the
  model's FLOPs (train/flops.py; the compiler's for the encoders) ÷ (roofline × peak), so a rematerialised forward
  the compiler counts again does not raise it."""
  batch = r.batch
  if r.error:
    return {
        "step": r.kind, "global batch": batch, "fits": "no (compiler: out of memory)",
        "compile s": f"{r.compile_s:.0f}", "json": {
            "fits": False, "error": r.error, "global_batch": batch, "hbm_capacity_bytes": capacity * per_chip,
            "hbm_capacity_bytes_per_device": capacity, "compile_s": r.compile_s
        }
    }
  hbm, t = r.hbm_bytes, max(r.flops / peak, r.bytes_accessed / bw)
  model = r.model_flops / devices if r.model_flops else r.flops
  fits = hbm <= capacity
  coll = ", ".join(f"{k} {v['count']} ({v['bytes'] / 1e9:.2f})" for k, v in sorted(r.collectives.items()))
  return {
      "step": r.kind, "global batch": batch, "HBM/device GiB (args + out − alias + temp + code)":
          f"{_gib(hbm)} ({_gib(r.argument_bytes)} + "
          f"{_gib(r.output_bytes)} − {_gib(r.alias_bytes)} + {_gib(r.temp_bytes)} + {_gib(r.code_bytes)})",
      "device HBM GiB": _gib(capacity), "fits": f"{'yes' if fits else 'no'} ({100 * (1 - hbm / capacity):+.0f} %)",
      "TFLOP/device (model; compiler)": f"{model / 1e12:.2f}; {r.flops / 1e12:.2f}",
      "GB accessed/device": f"{r.bytes_accessed / 1e9:.1f}", "collectives (count, GB)": coll or "none",
      "roofline ms": f"{1e3 * t:.1f}", "samples/s": f"{batch / t:,.0f}", "MFU": f"{100 * model / (t * peak):.0f} %",
      "compile s": f"{r.compile_s:.0f}", "json": {
          "global_batch": batch, "hbm_bytes_per_chip": hbm * per_chip, "hbm_capacity_bytes": capacity * per_chip,
          "hbm_bytes_per_device": hbm, "hbm_capacity_bytes_per_device": capacity, "fits": fits,
          "flops_per_chip": r.flops * per_chip, "flops_per_device": r.flops, "model_flops_per_device": model,
          "mfu": model / (t * peak), "bytes_accessed_per_device": r.bytes_accessed, "collectives": r.collectives,
          "roofline_s": t, "compile_s": r.compile_s, "temp_bytes": r.temp_bytes, "argument_bytes": r.argument_bytes,
          "output_bytes": r.output_bytes, "alias_bytes": r.alias_bytes, "code_bytes": r.code_bytes
      }
  }


def markdown(rows: list[dict]) -> str:
  lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
  return "\n".join(lines + ["| " + " | ".join(str(r.get(c, "")) for c in COLUMNS) + " |" for r in rows])


def _fits(c, devices, capacity: int, batch: int) -> bool:
  from compclip_jax.train import aot  # pylint: disable=import-outside-toplevel
  c = c.copy_and_resolve_references()
  c.batch_size = batch
  return all(not r.error and r.hbm_bytes <= capacity for r in aot.compile_steps(c, devices, encoders=False).values())


def find_batch(c, devices, capacity: int) -> int:
  """The largest global batch (a multiple of the devices) at which every training step kind fits (the evaluation
  encoders do not depend on it): from the config's batch, doubling while it fits or halving until it does, then
  bisection between the last that fits and the first that does not. 0: not even one row per device fits."""
  n = len(devices)
  start = max(n, c.batch_size // n * n)
  if _fits(c, devices, capacity, start):
    lo, hi = start, 2 * start
    while _fits(c, devices, capacity, hi):
      lo, hi = hi, 2 * hi
  else:
    lo, hi = start // 2 // n * n, start
    while lo and not _fits(c, devices, capacity, lo):
      lo, hi = lo // 2 // n * n, lo
  while hi - lo > n:
    mid = (lo + hi) // (2 * n) * n
    lo, hi = (mid, hi) if _fits(c, devices, capacity, mid) else (lo, mid)
  return lo


def fit_check(c, topology: str | None = None, num_slices: int = 1, find: bool = False, encoders: bool = True,
              only: tuple[str, ...] = (), text_len: int = 0, chip_config: str = "", hlo_dir: str = "") -> dict:
  """Compiles every program of config `c` and prints the table; returns the JSON report (`steps.<kind>.fits`).

  `topology` (a slice or topology string): its compile-only devices on this host. None: the TPU this process runs
  on (a Colab or Cloud TPU runtime: what the notebooks check before they train), its HBM as the runtime reports it.
  """
  if topology is None:
    import jax  # pylint: disable=import-outside-toplevel
    devices = jax.devices()
    if devices[0].platform != "tpu":
      raise cli.UserError(f"no TPU here ({devices[0].platform}): give a topology (--topology=v5e-8)")
    chip = tpu.chip_of(devices[0])
    chips = max(1, len(devices) * (getattr(devices[0], "num_cores", None) or 1) // chip.cores)
    topology = f"this runtime ({devices[0].device_kind})"
  else:
    topology, chip, chips = tpu.resolve(topology)
    devices = tpu.compile_only_devices(topology, num_slices, chip_config)
  from compclip_jax.train import aot  # pylint: disable=import-outside-toplevel  # after the TPU environment is set
  if c.batch_size % len(devices):
    raise cli.UserError(f"batch_size {c.batch_size} is not divisible by the {len(devices)} devices of {topology}")
  capacity = tpu.device_hbm_bytes(chip, devices[0])
  share = len(devices) / (chips * num_slices)  # devices per chip (a tpu7x chip, or a v4 one's cores alone: 2)
  peak, bw = chip.peak_flops / share, chip.hbm_bw / share
  print(
      f"{c.method} on {topology} × {num_slices} slice(s): {len(devices)} devices ({devices[0].device_kind}), "
      f"{_gib(capacity)} GiB HBM, {peak / 1e12:.0f} TFLOP/s bf16 and {bw / 1e9:.0f} GB/s per device", flush=True)
  reports = aot.compile_steps(c, devices, encoders, tuple(only), text_len)
  rows = [row(r, capacity, peak, bw, round(share), len(devices)) for r in reports.values()]
  if hlo_dir:
    os.makedirs(hlo_dir, exist_ok=True)
    for r in reports.values():
      with open(os.path.join(hlo_dir, f"{r.kind}.hlo.txt"), "w") as f:
        f.write(r.hlo)
  print(markdown(rows), flush=True)
  if c.model.scan_layers:  # measured: 1.20 vs 11.09 TFLOP for the same CLIC step (docs/tpu.md)
    print(
        "note: model.scan_layers: XLA's cost analysis counts a loop body once, so FLOPs, bytes, MFU and the "
        "roofline leave out all but one scanned block; memory is exact", flush=True)
  out = {
      "topology": topology, "chips": chips * num_slices, "devices": len(devices), "num_slices": num_slices,
      "cores_per_device": getattr(devices[0], "num_cores", None) or 1, "method": c.method, "global_batch": c.batch_size,
      "text_len": text_len or "full", "compute_dtype": c.model.compute_dtype, "attention": c.model.attention,
      "pad_tokens_to": c.model.pad_tokens_to, "steps": {r["step"]: r["json"] for r in rows}
  }
  if find:
    out["largest_global_batch"] = find_batch(c, devices, capacity)
    print(f"largest global batch at which every step fits: {out['largest_global_batch']}", flush=True)
  return out


def notebook_check(c, topology: str) -> bool | None:
  """The notebooks' fit check before they train: on a TPU runtime, `c`'s training steps compiled for its own TPU;
  elsewhere, where libtpu is installed, for `topology` (the Colab TPU it is meant for, e.g. v5e-1); else one line
  saying how. (The evaluation encoders, a fraction of a step, are left to the command.) Raises UserError when a
  step does not fit; returns whether it was checked. An empty `topology` (the notebooks' COLAB_TPU = "") checks on a
  TPU runtime only."""
  import jax  # pylint: disable=import-outside-toplevel
  on_tpu = jax.default_backend() == "tpu"
  if not on_tpu and not topology:
    print("fit check skipped: no TPU here and COLAB_TPU is empty")
    return False
  if not on_tpu and importlib.util.find_spec("libtpu") is None:
    print(f"fit check for {topology} skipped: no TPU here and no TPU compiler ({tpu.INSTALL})")
    return False
  out = fit_check(c, None if on_tpu else topology, encoders=False)
  misfits = [k for k, s in out["steps"].items() if not s["fits"]]
  if misfits:
    raise cli.UserError(f"{', '.join(misfits)} does not fit {out['topology']}: lower the batch or see docs/tpu.md")
  return True


def main(argv) -> None:
  cli.refuse_arguments(argv)
  out = fit_check(_CONFIG.value, _TOPOLOGY.value, _SLICES.value, _FIND.value, only=tuple(_ONLY.value),
                  text_len=_TEXT_LEN.value, chip_config=_CHIP_CONFIG.value, hlo_dir=_HLO.value or "")
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w") as f:
      json.dump(out, f, indent=2)
  misfits = [k for k, s in out["steps"].items() if not s["fits"]]
  if _REQUIRE.value and misfits:
    print(f"does not fit {out['topology']}: {', '.join(misfits)} (docs/tpu.md: remat, batch, mesh)", file=sys.stderr)
    sys.exit(1)


def run() -> None:
  sys.argv = config_args.resolve_argv(sys.argv)
  flags.mark_flag_as_required("config")
  cli.run(main)


if __name__ == "__main__":
  run()
