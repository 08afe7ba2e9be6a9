"""The demo's plots (compclip_jax/demo_plots.py) on hand-made metrics.jsonl rows: the PNG is written at its size, and
what is drawn is what the rows say (values × 100 at their steps, the control only when given, the chance levels as
the evaluators score, a missing metric left out)."""
import itertools
import logging
import math

import numpy as np
import pytest
from PIL import Image

from compclip_jax.demo import plots as demo_plots
from compclip_jax.train.metrics import tag

SC, SCPP = "eval/sugarcrepe", "eval/sugarcrepe_pp"
R5_IMG = tag("eval/coco_retrieval/image_retrieval_recall@5")
R5_TXT = tag("eval/coco_retrieval/text_retrieval_recall@5")


def _eval_row(step, swap, replace, itt, r5_img, r5_txt, images=300, texts=1500):
  return {
      "step": step, f"{SC}/swap": swap, f"{SC}/replace": replace, f"{SC}/swap_att/count": 300.0,
      f"{SCPP}/swap/itt": itt, f"{SCPP}/swap/tot": 0.1, R5_IMG: r5_img, R5_TXT: r5_txt,
      "eval/coco_retrieval/images": float(images), "eval/coco_retrieval/texts": float(texts),
      "eval/coco_retrieval/seconds": 1.0
  }


def _log_row(step, k):
  """A CLIC log row as train.py writes it: `loss`, each kind's `loss/<kind>`, the terms `clic/*`, and others."""
  return {
      "step": step, "loss": 2.0 - k, "loss/clic": 2.0 - k, "loss/clic_clip": 0.7, "clic/cont": 2.3 - k,
      "clic/sneg": 2.9 - k, "clic/uni": 0.05, "clic/neg_acc": 0.4, "clip/i2t": 0.7, "lr": 1e-4, "grad_norm": 3.0,
      "data/clic/seen": 10.0 * step
  }


def _rows(scale=1.0):
  evals = [
      _eval_row(0, 0.55 * scale, 0.70 * scale, 0.38 * scale, 0.52 * scale, 0.46 * scale),
      _eval_row(50, 0.60 * scale, 0.72 * scale, 0.40 * scale, 0.53 * scale, 0.47 * scale),
      _eval_row(100, 0.65 * scale, 0.75 * scale, 0.45 * scale, 0.55 * scale, 0.49 * scale)
  ]
  logs = [_log_row(s, 0.01 * i) for i, s in enumerate(range(10, 101, 10))]
  return [evals[0]] + logs[:4] + [evals[1]] + logs[4:] + [evals[2]]


def _size(path):
  with Image.open(path) as im:
    im.verify()  # a complete, valid PNG
  with Image.open(path) as im:
    assert im.format == "PNG"
    assert len(set(im.convert("RGB").getdata())) > 50  # drawn on, not a blank canvas
    return im.size


def test_report_draws_method_and_control_curves_in_percent_with_chance_levels(tmp_path):
  path = tmp_path / "report.png"
  out = demo_plots.plot_report(_rows(), str(path), "clic", _rows(0.9), "clip")
  assert _size(path) == (1400, 800)  # 14 × 8 in at 100 dpi
  c = out["curves"]
  assert c["clic: SugarCrepe swap (mean)"] == ([0, 50, 100], pytest.approx([55.0, 60.0, 65.0]))
  assert c["clic: SugarCrepe++ swap ITT"] == ([0, 50, 100], pytest.approx([38.0, 40.0, 45.0]))
  assert c["clip: SugarCrepe replace (mean)"] == ([0, 50, 100], pytest.approx([63.0, 64.8, 67.5]))
  assert c["clip: retrieval text R@5 (image→text)"][1] == pytest.approx([41.4, 42.3, 44.1])
  assert len(c) == 10  # 5 metrics × (method, control)
  ch = out["chance"]
  assert ch["chance SugarCrepe (binary choice)"] == 50.0
  assert ch["chance SugarCrepe++ ITT (1 of 3)"] == pytest.approx(100 / 3)
  assert ch["chance image R@5"] == pytest.approx(100 * 5 / 300)  # a caption's image among 300 by chance in the top 5
  # an image's 5 captions among 1500: none in the top 5 with probability (1495·…·1491)/(1500·…·1496)
  assert ch["chance text R@5"] == pytest.approx(100 * (1 - math.prod((1495 - j) / (1500 - j) for j in range(5))))


def test_report_without_control_plots_the_method_and_its_loss_terms(tmp_path):
  path = tmp_path / "report.png"
  out = demo_plots.plot_report(_rows(), str(path), "clic")
  assert _size(path) == (1400, 800)
  assert out["curves"] and all(k.startswith("clic: ") for k in out["curves"])
  # each kind's loss and the method's terms; not the alternating `loss`, accuracies, lr, data counters
  assert list(out["losses"]) == ["loss/clic", "loss/clic_clip", "clic/cont", "clic/sneg", "clic/uni"]
  steps, values = out["losses"]["clic/sneg"]
  assert steps == list(range(10, 101, 10)) and values == pytest.approx([2.9 - 0.01 * i for i in range(10)])
  out = demo_plots.plot_report(_rows(), str(path), "clic", loss_terms=("clic/uni", "loss/clic"))
  assert list(out["losses"]) == ["clic/uni", "loss/clic"]  # picked and ordered by loss_terms


def test_read_terms_are_found_by_default():
  rows = [{
      "step": 1, "loss": 3.0, "loss/read": 3.0, "read/con": 1.0, "read/rec": 2.0, "read/align": 0.1, "read/acc_i2t": 0.5
  }]
  assert demo_plots.default_loss_terms(rows) == ("loss/read", "read/con", "read/rec", "read/align")


def test_report_skips_missing_metrics_and_takes_one_eval_row(tmp_path, caplog):
  row = _eval_row(0, 0.5, 0.6, 0.3, 0.5, 0.4)
  for k in [k for k in row if k.startswith(SCPP) or k.startswith("eval/coco_retrieval/")]:
    del row[k]  # only SugarCrepe evaluated, no retrieval sizes either
  path = tmp_path / "one.png"
  with caplog.at_level(logging.WARNING):
    out = demo_plots.plot_report([row, {"step": 0, "event": "resumed", "dropped": 0}], str(path), "read",
                                 loss_terms=("read/rec",))
  assert _size(path) == (1400, 800)
  assert set(out["curves"]) == {"read: SugarCrepe swap (mean)", "read: SugarCrepe replace (mean)"}
  assert out["curves"]["read: SugarCrepe swap (mean)"] == ([0], [50.0])
  assert out["chance"] == {"chance SugarCrepe (binary choice)": 50.0}  # no ITT, no retrieval: no chance lines
  assert out["losses"] == {} and "read/rec" in caplog.text  # a term asked for but never logged: said so


def test_report_keeps_the_last_value_of_a_step_logged_twice_and_rejects_bad_rows(tmp_path):
  rows = [
      _eval_row(0, 0.5, 0.6, 0.3, 0.5, 0.4),
      _eval_row(50, 0.1, 0.6, 0.3, 0.5, 0.4),
      _eval_row(50, 0.7, 0.6, 0.3, 0.5, 0.4)
  ]
  out = demo_plots.plot_report(rows, str(tmp_path / "r.png"), "clic")
  assert out["curves"]["clic: SugarCrepe swap (mean)"] == ([0, 50], pytest.approx([50.0, 70.0]))
  with pytest.raises(ValueError, match="clip rows: row 1 "):
    demo_plots.plot_report(rows, str(tmp_path / "r.png"), "clic", [rows[0], {"loss": 1.0}], "clip")


def test_text_retrieval_chance_matches_enumeration():
  # 3 images, 2 captions each (6 texts), R@2: over every ranking of the 6 captions for one image, how often one of
  # its 2 captions is in the top 2
  hits = [min(p.index(0), p.index(1)) < 2 for p in itertools.permutations(range(6))]
  rows = [{"step": 0, "eval/coco_retrieval/images": 3.0, "eval/coco_retrieval/texts": 6.0}]
  chance = demo_plots.retrieval_chance(rows, k=2)
  assert chance["coco_retrieval/text_retrieval_recall@2"] == pytest.approx(np.mean(hits))
  assert chance["coco_retrieval/image_retrieval_recall@2"] == pytest.approx(2 / 3)
  rows = [{"step": 0, "eval/coco_retrieval/images": 3.0, "eval/coco_retrieval/texts": 7.0}]  # uneven: no text chance
  assert list(demo_plots.retrieval_chance(rows, k=2)) == ["coco_retrieval/image_retrieval_recall@2"]


def _cols():
  return {
      "pretrained": {
          "SugarCrepe swap (mean)": [0.5, 0.6, 0.7], "SugarCrepe++ swap ITT": [0.4, 0.4, 0.4],
          "retrieval image R@5": [0.3, 0.5, 0.4]
      },
      "clic": {
          "SugarCrepe swap (mean)": [0.8, 0.9, 0.7], "SugarCrepe++ swap ITT": [0.5],
          "retrieval image R@5": [0.2, 0.3, 0.4]
      },
      "read": {"SugarCrepe swap (mean)": [0.6, 0.6, 0.9]},  # no ITT, no retrieval
  }


def test_summary_bars_are_mean_and_std_over_seeds_with_chance(tmp_path):
  path = tmp_path / "summary.png"
  out = demo_plots.plot_summary(_cols(), str(path))
  assert _size(path) == (1400, 600)
  b = out["bars"]
  mean, std, seeds = b[("pretrained", "SugarCrepe swap (mean)")]
  assert (mean, std) == pytest.approx((60.0, 10.0)) and seeds == pytest.approx([50.0, 60.0, 70.0])  # ddof 1
  assert b[("read", "SugarCrepe swap (mean)")][:2] == pytest.approx((70.0, math.sqrt(300)))  # 60 60 90: var 300
  assert b[("clic", "SugarCrepe++ swap ITT")][:2] == (50.0, 0.0)  # one seed: no spread
  assert ("read", "SugarCrepe++ swap ITT") not in b and len(b) == 7  # a row a column lacks has no bar
  assert out["chance"] == {"SugarCrepe swap (mean)": 50.0, "SugarCrepe++ swap ITT": pytest.approx(100 / 3)}


def test_summary_labels_pick_rows_and_unknown_labels_are_refused(tmp_path):
  out = demo_plots.plot_summary(_cols(), str(tmp_path / "s.png"), labels=["retrieval image R@5"], title="R@5")
  assert set(out["bars"]) == {("pretrained", "retrieval image R@5"), ("clic", "retrieval image R@5")}
  assert out["chance"] == {}  # retrieval: no chance line
  with pytest.raises(ValueError, match="no column has row"):
    demo_plots.plot_summary(_cols(), str(tmp_path / "s.png"), labels=["SugarCrepe nope"])
