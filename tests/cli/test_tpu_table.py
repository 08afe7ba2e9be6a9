"""docs/tpu.md's measured tables are the compile command's own JSON files (docs/tpu_measured/, written by
tools/tpu_table.py measure): every number in the doc is rendered from them, each file is a case the tool knows with
the command that wrote it, and the paper configs that the doc says fit do fit with the margin it promises."""
import importlib.util
import json
import os

import pytest

from tests import paths

_SPEC = importlib.util.spec_from_file_location("tpu_table", os.path.join(paths.ROOT, "tools", "tpu_table.py"))
tpu_table = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tpu_table)

DOC = os.path.join(paths.ROOT, "docs", "tpu.md")
MARGIN = 0.10  # every paper config fits by default with ≥ 10 % margin on the compiler's numbers


def _measured() -> dict:
  out = {}
  for name in sorted(os.listdir(tpu_table.MEASURED)):
    with open(os.path.join(tpu_table.MEASURED, name)) as f:
      out[name[:-len(".json")]] = json.load(f)
  return out


def test_every_measurement_is_a_known_case_with_its_command():
  measured = _measured()
  assert measured, "no measurements in docs/tpu_measured"
  for case, r in measured.items():
    assert case in tpu_table.CASES, case
    assert r["measured"]["command"] == tpu_table.recorded_command(case, r), case
    for kind, s in r["steps"].items():
      assert s["hbm_capacity_bytes"] > 0 and s["compile_s"] > 0, (case, kind)
      if s["fits"]:
        assert 0 < s["hbm_bytes_per_chip"] and s["flops_per_chip"] > 0, (case, kind)


def test_the_doc_holds_the_tables_rendered_from_the_measurements():
  with open(DOC) as f:
    doc = f.read()
  assert tpu_table.render_recipe() in doc, "docs/tpu.md: paste `python tools/tpu_table.py render`"
  assert tpu_table.render_paper() in doc, "docs/tpu.md: paste `python tools/tpu_table.py render`"
  assert tpu_table.render_pod() in doc, "docs/tpu.md: paste `python tools/tpu_table.py render`"
  assert tpu_table.render_knobs() in doc, "docs/tpu.md: paste `python tools/tpu_table.py render`"
  assert tpu_table.render_speed() in doc, "docs/tpu.md: paste `python tools/tpu_table.py render`"


def test_the_paper_configs_fit_with_margin():
  """The paper configs, as they ship (bf16) and at fp32 (every training step and the evaluation encoders)."""
  measured = _measured()
  for case in (f"{c}{precision}" for c in ("clic_b32_v5e-8", "clic_read_b32_v5e-8", "read_b32_v5e-8",
                                           "negclip_b32_v5e-8", "clic_l14_v5e-16", "clic_l14_v4-8")
               for precision in ("", "_bf16")):
    if case not in measured:
      continue  # not measured yet: the doc says so (test_the_doc_names_what_is_not_measured)
    for kind, s in measured[case]["steps"].items():
      assert s["fits"] and s["hbm_bytes_per_device"] <= (1 - MARGIN) * s["hbm_capacity_bytes_per_device"], (case, kind)


def test_the_recipe_rows_are_the_recipe_and_the_grid_rows_fp32():
  """A `<case>_bf16` file was compiled as the recipe ships (bf16 compute, attention "auto", which is the fused
  kernel on a TPU, 77 tokens run as 80); its fp32 row beside it in the table is the grid's case of the same name
  without `_bf16` (tpu7x has none)."""
  measured = _measured()
  for case, r in measured.items():
    kind, method = tpu_table.CASES[case][:2]
    if kind == "recipe":
      recipe = importlib.import_module(f"configs.{method}").get_config().model
      assert (r["compute_dtype"], r["attention"], r.get("pad_tokens_to")) == (
          recipe.compute_dtype, recipe.attention, recipe.pad_tokens_to) == ("bfloat16", "auto", 16), case
      fp32 = tpu_table._fp32_case(case)
      assert tpu_table.CASES[fp32][0] == "paper" if fp32 in tpu_table.CASES else "tpu7x" in case, case
      assert "compute_dtype" not in tpu_table.recorded_command(case, r), case
    else:  # every other case runs the batch's own width (measured before the switch, or with it set to 1)
      assert r.get("pad_tokens_to", 1) == 1 and "--config.model.pad_tokens_to=1" in tpu_table.command(case), case
    if kind == "paper":
      assert r.get("compute_dtype", "float32") == "float32" and r.get("attention", "xla") == "xla", case


@pytest.mark.parametrize("slice_, knob_name, flag",
                         [("v5e-8", "remat_vision", "--config.model.remat_vision=True"),
                          ("v4-8", "remat_vision", "--config.model.remat_vision=True"),
                          ("v5e-8", "shard_optimizer", "--config.mesh.shard_optimizer=True")])
def test_a_knob_row_keeps_the_margin_its_shipped_row_does_not(slice_, knob_name, flag):
  """The knob table's promise (docs/tpu.md): READ with ViT-L/14 at 256 on a v5e-8 or a v4-8 keeps no 10 % margin as
  it ships and keeps it with model.remat_vision, or (v5e-8) with mesh.shard_optimizer."""
  measured, knob_case = _measured(), f"knob_read_l14_{slice_}_{knob_name}"
  if knob_case not in measured:
    return  # not measured yet: the doc says so
  shipped, knob = (measured[c]["steps"]["read"] for c in (f"read_l14_{slice_}", knob_case))
  margin = lambda s: 1 - s["hbm_bytes_per_device"] / s["hbm_capacity_bytes_per_device"]
  assert margin(shipped) < MARGIN <= margin(knob) and knob["fits"]
  assert flag in tpu_table.command(knob_case)


def test_the_doc_names_what_is_not_measured():
  with open(DOC) as f:
    doc = f.read()
  listed = tpu_table.NOT_MEASURED.search(doc).group(0)
  for case in tpu_table.CASES:
    assert (f"`{case}`" in listed) == (case in tpu_table.not_measured()), (case, "python tools/tpu_table.py write")


def test_the_doc_names_and_marks_what_shows_an_earlier_program():
  """A case in EARLIER_PROGRAM is listed and its rows carry a † while its file is the one of the listed commit; a
  file of that case measured at another commit is today's program (no mark)."""
  with open(DOC) as f:
    doc = f.read()
  listed = tpu_table.EARLIER.search(doc).group(0)
  for case in tpu_table.CASES:
    assert (f"`{case}`" in listed) == (case in tpu_table.earlier_program()), (case, "python tools/tpu_table.py write")
  case, commit = next(iter(tpu_table.EARLIER_PROGRAM.items()))
  assert tpu_table.earlier(case, {"measured": {"commit": commit + "abc"}})
  assert not tpu_table.earlier(case, {"measured": {"commit": "0000000"}}) and not tpu_table.earlier(case, None)
  assert not tpu_table.earlier("clic_b32_v5e-8", {"measured": {"commit": commit}})
  marked = [line for line in tpu_table.render().splitlines() if " †," in line]
  assert len(marked) >= len(tpu_table.earlier_program()) and all(line.startswith("| read") for line in marked)


def test_write_is_what_the_doc_holds(tmp_path):
  """`write` on a copy of the doc changes nothing (the doc is up to date), and on a stale copy restores it."""
  with open(DOC) as f:
    doc = f.read()
  copy = tmp_path / "tpu.md"
  copy.write_text(doc.replace(tpu_table.render_pod(), "| slice | slices | stale |\n|---|"))
  tpu_table.write_doc(str(copy))
  assert copy.read_text() == doc


def test_the_collectives_the_doc_shows_are_counted_per_channel():
  """The pod table shows collectives: each of its files was written by the counter that counts one per channel (a
  split gather's pieces once; aot.collectives), not one per HLO line."""
  for case, r in _measured().items():
    if tpu_table.CASES[case][0] == "pod":
      assert r["measured"].get("collectives_counted") == "per channel", (case, "python tools/tpu_table.py measure")
