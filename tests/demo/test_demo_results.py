"""The demo's results on docs/demo.md and the README come from the sweep records in docs/demo_measured/ (written by
`tools/demo_results.py collect` from a sweep's workdir): every generated block on those pages equals what the tool
renders from the files, each record's tables agree with its own runs' metrics rows, and the figures exist."""
import importlib.util
import os

import pytest

from compclip_jax.demo import run as demo
from compclip_jax.demo import tables
from tests import paths

_SPEC = importlib.util.spec_from_file_location("demo_results", os.path.join(paths.ROOT, "tools", "demo_results.py"))
demo_results = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(demo_results)


@pytest.mark.parametrize("page,name", sorted(demo_results.blocks()))
def test_each_generated_block_is_what_the_tool_renders_from_the_records(page, name):
  with open(os.path.join(paths.ROOT, page)) as f:
    text = f.read()
  held = demo_results.page_block(text, name)
  assert held is not None, f"{page}: no block {name}"
  assert held == demo_results.blocks()[(page, name)], f"{page}: run `python tools/demo_results.py write`"


@pytest.mark.parametrize("family", demo_results.FAMILIES)
def test_each_record_is_a_whole_sweep_whose_tables_are_its_runs_last_evaluations(family):
  r = demo_results.load(family)
  assert r is not None, f"docs/demo_measured/sweep_{family}.json is missing"
  assert r["family"] == family and r["seeds"] == [0, 1, 2] and len(r["git_commit"]) == 40
  assert set(r["cols"]) == {"pretrained", *demo.SWEEP_METHODS}
  for k, seed in enumerate(r["seeds"]):
    runs = r["runs"][str(seed)]
    assert set(runs) == set(demo.SWEEP_METHODS)
    for name, rows in runs.items():
      table = tables.before_after(rows)
      for label, (before, after) in table.items():
        assert r["cols"][name][label][k] == pytest.approx(after, rel=1e-5), (seed, name, label)
        assert r["cols"]["pretrained"][label][k] == pytest.approx(before, rel=1e-5), (seed, name, label)
      assert max(row["step"] for row in rows) == 300, (seed, name)
    assert 0.9 < r["negative_kinds"][str(seed)]["same_kind_share"] <= 1


def test_the_figures_the_pages_name_exist():
  for family in demo_results.FAMILIES:
    assert os.path.getsize(os.path.join(paths.ROOT, "docs", f"demo_summary_{family}.png")) > 10_000
  for method, _ in demo_results.REPORTS:
    assert os.path.getsize(os.path.join(paths.ROOT, "docs", f"demo_report_{method}_seed0.png")) > 10_000
