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
  assert len(held_out) == synthetic.HELD_OUT and not set(train_bindings) & set(held_out)
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
  assert len(sc.images) == 40
  assert registry.load("coco_retrieval", bench["data_dir"], bench["image_dir"]).task == "zeroshot_retrieval"
