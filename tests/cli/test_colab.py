"""The Colab notebooks, executed top to bottom on CPU in their tiny setting (nbclient): any cell error fails."""
import importlib.util
import os

import nbformat
import pytest
from nbclient import NotebookClient

from tests import paths
from compclip_jax.data.synthetic import benchmarks as synthetic_benchmarks

ROOT = paths.ROOT
COLAB = os.path.join(ROOT, "launch", "colab")


def _execute(name: str, overrides: str) -> nbformat.NotebookNode:
  """Runs launch/colab/<name> with `overrides` as a cell right after the parameters cell (papermill's convention)."""
  nb = nbformat.read(os.path.join(COLAB, name), as_version=4)
  assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{name}: clear the outputs"
  k = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
  nb.cells.insert(k + 1, nbformat.v4.new_code_cell(overrides))
  NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": ROOT}}).execute()
  return nb


def _printed(nb) -> str:
  """Everything the executed notebook's cells printed."""
  return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def _printed_the_fit_check(nb, checks, rows):
  """Before training, each notebook compiled its configs for the Colab TPU (v5e-1) and printed the table, where
  libtpu is installed (CI installs it); else it said how to get the check."""
  text = _printed(nb)
  if importlib.util.find_spec("libtpu") is None:
    assert "fit check for v5e-1 skipped" in text
    return
  assert text.count(" on v5e:1x1 × 1 slice(s): 1 devices (TPU v5 lite)") == checks, text[-3000:]
  assert text.count("| yes (") == rows and "| no (" not in text  # every training step fits


@pytest.fixture(autouse=True)
def _kernel_imports_this_checkout(monkeypatch):
  monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.mark.slow
def test_demo_notebook_runs_read_tiny(tmp_path):
  # COLAB_TPU = "": no fit check off a TPU (the check itself: the BYO notebook's test below, tests/cli/test_compile.py)
  nb = _execute("demo.ipynb", f"METHOD, TINY, INSTALL, WORKDIR, COLAB_TPU = 'read', True, False, {str(tmp_path)!r}, ''")
  assert (tmp_path / "report_read.png").exists() and (tmp_path / "clip_all" / "metrics.jsonl").exists()  # + control
  assert not (tmp_path / "pretrained").exists()  # from the shipped starting point
  text = _printed(nb)
  assert text.count("fit check skipped: no TPU here and COLAB_TPU is empty") == 2 and " on v5e:1x1" not in text
  shown = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "display_data"]
  assert any("image/png" in o["data"] for o in shown) and any("text/markdown" in o["data"] for o in shown)


@pytest.mark.slow
def test_byo_checkpoint_notebook_on_a_random_hf_clip(tmp_path):
  from tests import hf_fixtures as fx
  fx.random_hf_clip(fx.hf_clip_config(), seed=3).save_pretrained(tmp_path / "model")
  bench = synthetic_benchmarks.write_benchmarks(str(tmp_path / "bench"), 16)
  nb = _execute(
      "byo_checkpoint.ipynb", f"""
CHECKPOINT = {str(tmp_path / 'model')!r}
BENCH_DATA_DIR, BENCH_IMAGE_DIR = {bench['data_dir']!r}, {bench['image_dir']!r}
BENCHMARKS = ("sugarcrepe", "sugarcrepe_pp")
STEPS, BATCH, LR = 4, 8, 1e-4
WORKDIR, MOUNT_DRIVE, INSTALL = {str(tmp_path / 'work')!r}, False, False""")
  assert (tmp_path / "work" / "clic" / "export" / "hf" / "model.safetensors").exists()
  _printed_the_fit_check(nb, 1, 2)  # clic: clic, clic_clip
  text = _printed(nb)
  assert "max relative difference transformers vs JAX" in text
