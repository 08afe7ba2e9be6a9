"""The measured figures of the docs/ pages come from measurement files (docs/measured/, and the compile command's and
the demo's records), through tools/doc_figures.py: every page is exactly what the tool writes from them, every
measurement file says what, how, where and when it was measured and is read by a page, and a stale figure, a stale
block or a missing file fails."""
import importlib.util
import json
import os
import re

import pytest

from tests import paths

_SPEC = importlib.util.spec_from_file_location("doc_figures", os.path.join(paths.ROOT, "tools", "doc_figures.py"))
doc_figures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(doc_figures)


def _text(page):
  with open(os.path.join(paths.ROOT, page), encoding="utf-8") as f:
    return f.read()


@pytest.mark.parametrize("page", doc_figures.pages())
def test_each_page_is_what_the_tool_writes_from_the_measurement_files(page):
  text = _text(page)
  assert doc_figures.render(page, text) == text, f"{page}: run `python tools/doc_figures.py write` (or fix the file)"


def test_the_pages_hold_generated_figures_and_every_block_the_tool_renders():
  figures = {page: len(doc_figures.FIG.findall(_text(page))) for page in doc_figures.pages()}
  for page in ("docs/performance.md", "docs/tpu.md", "docs/siglip.md", "docs/fidelity.md", "docs/demo.md"):
    assert figures[page] > 0, page
  for page, name in doc_figures.BLOCKS:
    assert f"<!-- doc_figures:{name} -->" in _text(page), (page, name)


@pytest.mark.parametrize("name", doc_figures.measurement_names())
def test_each_measurement_file_records_how_it_was_measured_and_is_read_by_a_page(name):
  with open(os.path.join(doc_figures.MEASURED, f"{name}.json"), encoding="utf-8") as f:
    r = json.load(f)
  for key in doc_figures.REQUIRED:
    assert r.get(key), (name, key)
  assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", r["date"]), (name, r["date"])
  assert isinstance(r["versions"], dict) and isinstance(r["figures"], dict), name
  assert doc_figures.uses()[name], f"docs/measured/{name}.json: no page reads it"


def test_the_measurement_files_are_there():
  assert len(doc_figures.measurement_names()) >= 20


def test_a_stale_figure_fails_and_write_restores_it():
  page = "docs/performance.md"
  text = _text(page)
  m = doc_figures.FIG.search(text)
  stale = text[:m.start(2)] + "999.9" + text[m.end(2):]
  assert stale != text and doc_figures.render(page, stale) == text


def test_a_stale_block_fails_and_write_restores_it():
  page = "docs/tpu.md"
  text = _text(page)
  start = text.index("<!-- doc_figures:remat -->\n") + len("<!-- doc_figures:remat -->\n")
  stale = text[:start] + "| setting | stale |\n|---|---|\n" + text[start:]
  assert doc_figures.render(page, stale) == text


def test_a_missing_measurement_file_fails(tmp_path, monkeypatch):
  for name in doc_figures.measurement_names():
    if name != "side_by_side_clic":
      (tmp_path / f"{name}.json").write_text(_text(f"docs/measured/{name}.json"), encoding="utf-8")
  monkeypatch.setattr(doc_figures, "MEASURED", str(tmp_path))
  with pytest.raises(doc_figures.MissingMeasurement, match="side_by_side_clic"):
    doc_figures.render("docs/performance.md", _text("docs/performance.md"))
  assert any("side_by_side_clic" in p for p in doc_figures.check())


def test_a_figure_may_not_start_a_line():
  """Markdown reads a comment at the start of a line as an HTML block, which would end the paragraph there."""
  text = "The step takes\n<!-- fig bench_train_read.step_s:.2f -->3.40<!-- /fig --> s.\n"
  with pytest.raises(ValueError, match="starts the line"):
    doc_figures.render_page(text)
  assert doc_figures.render_page(text.replace("takes\n", "takes ")) == text.replace("takes\n", "takes ")


def test_figure_expressions_and_formats():
  assert doc_figures.figure("bench_train_clic.clic_step_keep_s:/.2f") == "5.21 / 5.30"
  assert doc_figures.figure("pipeline_clic.text_side_cached:,") == "4,291"
  assert doc_figures.figure("host_memory_faults.default_system_s:.1f") == "1.0–1.3"
  assert doc_figures.figure("parity_clip_hf.text_embedding_max_abs_diff:sci1") == "3.7e-6"
  assert doc_figures.figure("demo_pretrain.clip_seconds:min") == "17 min"
  assert doc_figures.figure('hbm("clic_b32_v5e-8"):.2f') == "3.10"
  for bad in ("__import__('os')", "open('x')", "bench_train_clic.__class__", "(lambda: 1)()"):
    with pytest.raises((ValueError, KeyError)):
      doc_figures.figure(bad)
