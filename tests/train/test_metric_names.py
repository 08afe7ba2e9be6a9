"""TensorBoard and metrics.jsonl use the same, TensorBoard-legal metric names, and a run's hparams are recorded.
Read back from the event file itself (TFRecord framing + tensorboardX's Event proto)."""
import glob
import json
import logging
import struct

from tensorboardX.proto import event_pb2

from compclip_jax.train.metrics import MetricWriter, tag


def _events(tb_dir):
  out = []
  for path in glob.glob(f"{tb_dir}/events.*"):
    with open(path, "rb") as f:
      while header := f.read(12):
        (n,) = struct.unpack("<Q", header[:8])
        data = f.read(n)
        f.read(4)
        e = event_pb2.Event()
        e.ParseFromString(data)
        out.append(e)
  return out


def test_recall_at_k_and_other_illegal_characters_get_the_same_legal_name_in_both_logs(tmp_path, caplog):
  names = {
      "eval/coco_retrieval/image_retrieval_recall@5": 0.25, "eval/zeroshot:cifar/acc1": 0.5, "loss": 1.0,
      "eval/sugarcrepe/swap_att": 0.75
  }
  w = MetricWriter(
      str(tmp_path), 10, 8, hparams={
          "method": "clic", "optim": {"lr": 1e-5, "trainable": ("a", "b")}, "batch_size": 800,
          "data": {"clean_text": True}
      })
  with caplog.at_level(logging.WARNING):
    w.write(1, names, console=False)
  w.close()
  assert "illegal" not in caplog.text
  (line,) = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  want = {
      "eval/coco_retrieval/image_retrieval_recall_at_5", "eval/zeroshot_cifar/acc1", "loss", "eval/sugarcrepe/swap_att"
  }
  assert set(line) - {"step"} == want
  events = _events(tmp_path / "tb")
  scalars = {v.tag for e in events for v in e.summary.value if v.HasField("simple_value")}
  assert scalars == want
  plugins = {
      v.metadata.plugin_data.plugin_name: v for e in events for v in e.summary.value
      if v.metadata.plugin_data.plugin_name
  }
  assert "hparams" in plugins
  blob = b"".join(v.metadata.plugin_data.content for e in events for v in e.summary.value
                  if v.metadata.plugin_data.plugin_name == "hparams")
  for key in (b"method", b"optim.lr", b"optim.trainable", b"batch_size", b"data.clean_text", b"clic"):
    assert key in blob, key


def test_tag_is_idempotent_and_keeps_legal_names():
  assert tag("eval/coco/text_retrieval_recall@10") == "eval/coco/text_retrieval_recall_at_10"
  assert tag(tag("a b@1")) == tag("a b@1") == "a_b_at_1"
  assert tag("loss/cont-1.x") == "loss/cont-1.x"
