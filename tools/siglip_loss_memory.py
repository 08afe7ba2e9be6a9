"""SigLIP's sigmoid loss and its gradients compiled for a v5e-8 by libtpu on this host: the global form (XLA
partitions the [B, B] logits by rows: [b, B] per device) against the sharded form (models/siglip/loss.py: [b, b]
blocks round the ring), per device — temporaries, arguments + outputs, collectives.

  python tools/siglip_loss_memory.py [GLOBAL_BATCH ...]   # default 4096 16384; needs requirements-tpu-compile.txt
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "true")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WIDTH = 768  # SigLIP B/16's embedding width


def measure(batch: int, width: int = WIDTH, topology: str = "v5e:2x4") -> dict:
  """{"global" | "sharded": {"temp_bytes", "io_bytes", "collectives"}} per device at global batch `batch`."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # pylint: disable=import-outside-toplevel
  from compclip_jax.train import tpus as tpu  # pylint: disable=import-outside-toplevel
  from compclip_jax.models.siglip.loss import sharded_sigmoid_loss, sigmoid_loss  # pylint: disable=import-outside-toplevel
  from compclip_jax.train import aot  # pylint: disable=import-outside-toplevel
  mesh = Mesh(np.array(tpu.compile_only_devices(topology)), ("data",))
  x = jax.ShapeDtypeStruct((batch, width), jnp.float32, sharding=NamedSharding(mesh, P("data")))
  s = jax.ShapeDtypeStruct((1,), jnp.float32, sharding=NamedSharding(mesh, P()))
  out = {}
  for name, fn in (("global", sigmoid_loss), ("sharded", lambda *a: sharded_sigmoid_loss(*a, mesh=mesh))):
    c = jax.jit(jax.value_and_grad(fn, argnums=(0, 1, 2, 3))).lower(x, x, s, s).compile()
    m = c.memory_analysis()
    out[name] = {
        "temp_bytes": m.temp_size_in_bytes, "io_bytes": m.argument_size_in_bytes + m.output_size_in_bytes,
        "collectives": aot.collectives(c.as_text())
    }
  return out


def main(argv: list[str]) -> int:
  print("| global batch | form | temporaries MiB/device | arguments + outputs MiB/device | collectives per device |")
  print("|---|---|---|---|---|")
  for batch in [int(a) for a in argv[1:]] or [4096, 16384]:
    for name, r in measure(batch).items():
      coll = ", ".join(f"{k} {v['count']} / {v['bytes'] / 2**20:.1f} MiB" for k, v in sorted(r["collectives"].items()))
      print(f"| {batch} | {name} | {r['temp_bytes'] / 2**20:.1f} | {r['io_bytes'] / 2**20:.1f} | {coll} |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
