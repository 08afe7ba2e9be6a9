"""A run fed given batches (`train.loop.run(…, batches=)`, what the trajectory tests use to feed the reference code's
batches): it trains on exactly those, in step order, and the rest of the run is the trainer's own."""
import json

import numpy as np

from tests import worlds
from compclip_jax import methods
from compclip_jax.train import loop as train
from compclip_jax.train import trainer
from configs import clic


def _losses(workdir) -> list[float]:
  with open(workdir / "metrics.jsonl") as f:
    rows = [json.loads(line) for line in f]
  return [r["loss"] for r in rows if "loss" in r]


def test_a_run_fed_its_own_pipelines_batches_is_the_same_run_and_other_batches_another(tmp_path):
  c = clic.get_config("runlocal")
  c.log_every, c.evals.benchmarks, c.total_steps = 1, (), 4
  worlds.use_shared_world(c)
  method = methods.get(c.method)
  t = trainer.setup(c, str(tmp_path / "read"))  # the pipelines as the run builds them: record their batches
  given = {k: [] for k in t.pipes}
  for step in range(c.total_steps):
    kind = method.kind_at(c, step).name
    given[kind].append(next(t.pipes[kind]))
  assert set(given) == {"clic", "clic_clip"} and len(given["clic"]) == 2  # CLIC and CLIP steps alternate
  train.run(c, str(tmp_path / "own"))
  train.run(c, str(tmp_path / "given"), batches=given)
  own, fed = _losses(tmp_path / "own"), _losses(tmp_path / "given")
  assert len(own) == len(fed) == 4 and np.allclose(own, fed, rtol=1e-6, atol=0), (own, fed)
  # other batches (the images of the CLIC steps flipped) are another run
  flipped = {k: [{**b, "image": b["image"][:, ::-1]} for b in v] if k == "clic" else v for k, v in given.items()}
  train.run(c, str(tmp_path / "flipped"), batches=flipped)
  assert not np.allclose(own, _losses(tmp_path / "flipped"), rtol=1e-6, atol=0)
