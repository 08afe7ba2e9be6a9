"""sharding.HostAgreement across two real jax.distributed processes: every process gets the largest value of the
call, call after call, whatever each process put in (the trimmed token width of a global batch)."""
import json
import os
import subprocess
import sys

from tests import paths

ROOT = paths.ROOT
WORKER = """
import json, sys
import jax
jax.distributed.initialize(f"127.0.0.1:{sys.argv[1]}", num_processes=2, process_id=int(sys.argv[2]))
from compclip_jax import sharding
agree = sharding.HostAgreement()
me = jax.process_index()
values = [[16, 48], [77, 32], [32, 32], [5, 64], [64, 5]]  # per call: what process 0 and process 1 put in
print(json.dumps([agree.max(v[me]) for v in values]), flush=True)
jax.distributed.shutdown()
"""


def test_two_processes_agree_on_the_largest_value_of_every_call():
  import portpicker
  port = portpicker.pick_unused_port()
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
  procs = [
      subprocess.Popen([sys.executable, "-c", WORKER, str(port), str(i)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True) for i in range(2)
  ]
  outs = [p.communicate(timeout=300) for p in procs]
  assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
  for out, _ in outs:
    assert json.loads(out.strip().splitlines()[-1]) == [48, 77, 32, 64, 64]
