"""The demo's claim, checked on one seed: the methods that beat their same-seed control in the 3-seed sweep
(docs/demo_measured/sweep_clip.json: held-out swap and SugarCrepe++ swap ITT ahead on every seed, no more than
1 point of R@5 lost on average) still do on seed 0, each with its control run here from the shipped starting point on
seed 0's world with the demo's own config, and by about what the sweep recorded for that seed (±3 points: the bytes
may differ across machines and XLA versions). CLIC, the README's demo, is run against its control either way and its
lead compared with the record's.

Manual tier (minutes on 2 cores: the 16,000-scene world once, then each run):
  COMPCLIP_MANUAL_TESTS=1 python -m pytest tests/demo/test_demo_effect.py -s
The full claim, over three seeds and every method, is the sweep of docs/demo.md."""
import json
import os

import numpy as np
import pytest

from compclip_jax.demo import run as demo
from compclip_jax.demo import tables
from tests import paths

RECORD = os.path.join(paths.ROOT, "docs", "demo_measured", "sweep_clip.json")
TOLERANCE = 0.03


def _record() -> dict:
  with open(RECORD) as f:
    return json.load(f)


def _pairs() -> list[tuple[str, str]]:
  """(method, control) of the methods (not the ablations) that met the hypothesis in the sweep, and CLIC's."""
  cols = _record()["cols"]
  met = [(m, demo.CONTROL_OF[m]) for m in ("clic", "negclip", "read", "clic_read")
         if tables.hypothesis_met(cols, m, demo.CONTROL_OF[m])]
  return sorted(set(met) | {("clic", "clip")})


@pytest.mark.slow
@pytest.mark.manual
def test_methods_that_beat_their_control_in_the_sweep_still_do_on_seed_0(tmp_path):
  r = _record()
  k = r["seeds"].index(0)
  pairs = _pairs()
  names = sorted({n for pair in pairs for n in pair}, key=lambda n: n not in demo.CONTROL_OF.values())
  got = {}
  for name in names:  # controls first, as the sweep runs them
    c = demo.demo_config(name)
    c.seed = 0
    got[name] = {label: after for label, (_, after) in demo.run(c, str(tmp_path), name).items()}
  for m, control in pairs:
    met = tables.hypothesis_met(r["cols"], m, control)
    for row in tables.HYPOTHESIS_SWAP + tables.HYPOTHESIS_R5:
      lead = got[m][row] - got[control][row]
      recorded = r["cols"][m][row][k] - r["cols"][control][row][k]
      print(f"{m} − {control}, {row}: {100 * lead:+.1f} (sweep, seed 0: {100 * recorded:+.1f})")
      assert abs(lead - recorded) <= TOLERANCE, (m, row, lead, recorded)
      if met and row in tables.HYPOTHESIS_SWAP:
        assert lead > 0, (m, row)
  assert np.isfinite(list(got["clic"].values())).all()
  assert (tmp_path / "report_clic.png").stat().st_size > 10_000  # drawn against the control's run
