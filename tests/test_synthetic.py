"""The synthetic world: real formats, and benchmarks made only of colour–shape bindings training never shows."""
import json
import re

from compclip_jax import synthetic
from compclip_jax.data.sources import CocoSource, CsvSource
from compclip_jax.evaluators import registry

PAIR = re.compile(r"\b(" + "|".join(synthetic.COLORS) + r") (" + "|".join(synthetic.SHAPES) + r")\b")


def test_world_and_benchmarks(tmp_path):
  world = synthetic.write_world(str(tmp_path / "w"), 60, seed=3)
  bench = synthetic.write_benchmarks(str(tmp_path / "b"), 40, seed=4)
  train_bindings, held_out = synthetic.split_bindings()
  assert len(held_out) == synthetic.HELD_COLORS * synthetic.HELD_SHAPES and not set(train_bindings) & set(held_out)
  src = CsvSource(world["csv"], world["images"])
  assert len(src) == 60 and not src.rejected
  seen = {m for i in range(len(src)) for m in PAIR.findall(src[i]["sentences"][0])}
  assert seen and seen <= set(train_bindings)  # training captions never bind a held-out pair
  assert len(CocoSource(world["coco_json"], world["images"], ("train",))) == 60
  sc = registry.load("sugarcrepe", bench["data_dir"], bench["image_dir"])
  rows = json.load(open(f"{bench['data_dir']}/sugarcrepe/swap_att.json"))
  for r in rows.values():  # benchmark images show held-out bindings only
    assert set(PAIR.findall(r["caption"])) <= set(held_out)
    assert sorted(r["caption"].split()) == sorted(r["negative_caption"].split())  # a swap keeps the words
    assert set(PAIR.findall(r["negative_caption"])) <= set(held_out)  # and its negative is unseen too
  assert len(sc.images) == 40
  assert registry.load("coco_retrieval", bench["data_dir"], bench["image_dir"]).task == "zeroshot_retrieval"


def test_demo_path_runs_caches_and_reports(tmp_path):
  from compclip_jax import demo
  from configs import clic, negclip

  def small(module):
    c = module.get_config("demo")
    c.data.generate, c.evals.generate, c.data.image_size = 40, 16, 32
    c.demo.pretrain_steps, c.demo.pretrain_batch = 4, 8
    c.batch_size, c.total_steps, c.evals.every_steps, c.log_every, c.checkpoint.every_steps = 8, 4, 2, 2, 4
    return c

  table = demo.run(small(clic), str(tmp_path))
  assert "SugarCrepe swap_att" in table and "retrieval image R@1" in table
  assert all(0.0 <= b <= 1.0 and 0.0 <= a <= 1.0 for b, a in table.values())
  assert (tmp_path / "report_clic.md").exists() and (tmp_path / "report_clic.png").stat().st_size > 10_000
  pretrained = tmp_path / "pretrained" / "export" / "hf" / "model.safetensors"
  stamp = pretrained.stat().st_mtime_ns
  demo.run(small(negclip), str(tmp_path))  # another method reuses the cached pretrained model
  assert pretrained.stat().st_mtime_ns == stamp
  assert (tmp_path / "report_negclip.md").exists()
