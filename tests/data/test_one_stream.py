"""CLIC's CLIC and CLIP steps read ONE shuffled order (METHODS §1.4): step g gets global batch g of it, whatever its
kind, so in an epoch every row is used exactly once, alternately by CLIC and CLIP steps — with exact resume, the same
global batches on 1 or 2 processes, and skipped records refilled within their own kind."""
import json

import numpy as np
import pytest

from compclip_jax import methods
from compclip_jax.data import pipeline as pl
from compclip_jax.data.sources import CsvSource
from compclip_jax.methods.clic import samples as clic_samples
from tests import data_fixtures as df

B = 4


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
  csv, root, _, _ = df.write_clic_csv(tmp_path_factory.mktemp("clean"), n=23, broken=False)  # + 1 16-bit image
  return CsvSource(str(csv), str(root))


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
  csv, root, bad, _ = df.write_clic_csv(tmp_path_factory.mktemp("broken"), n=24)
  return CsvSource(str(csv), str(root)), bad


def _kind(step, clip_every):
  """CLIC's step kind at `step` (methods/clic.py; its alternation has its own test in tests/methods/test_methods.py)."""
  cycle = methods.clic.cycle(clip_every)
  return cycle[step % len(cycle)].name


def _pipes(src, tok, tagger, clip_every=1, process_index=0, process_count=1, num_epochs=1, seed=5):
  period = clip_every + 1
  shares = pl.interleave([_kind(g, clip_every) for g in range(period)])
  return {
      k: pl.make_batches(
          src,
          pl.PipelineConfig(methods.step_kind(k), B, seed=seed, num_epochs=num_epochs, max_skip_fraction=0.5,
                            options=clic_samples.Options(image_size=32), period=period, slots=slots), tok, None,
          process_index, process_count, tagger) for k, (period, slots) in shares.items()
  }


def _run(pipes, start, stop, clip_every=1):
  """The training loop's batch fetch: step g pulls from the pipeline of its kind → [(kind, batch, records, pos)]."""
  out = []
  for g in range(start, stop):
    kind = _kind(g, clip_every)
    batch = next(pipes[kind])
    out.append((kind, batch, pipes[kind].last_records.copy(), pipes[kind].last_positions.copy()))
  return out


def _same(xs, ys):
  assert len(xs) == len(ys)
  for (k1, b1, r1, p1), (k2, b2, r2, p2) in zip(xs, ys):
    assert k1 == k2 and b1.keys() == b2.keys()
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(p1, p2)
    for k in b1:
      np.testing.assert_array_equal(b1[k], b2[k])


def test_interleave():
  assert pl.interleave(["clic", "clic_clip"]) == {"clic": (2, (0,)), "clic_clip": (2, (1,))}
  assert pl.interleave(["clic", "clic", "clic_clip"]) == {"clic": (3, (0, 1)), "clic_clip": (3, (2,))}
  assert pl.interleave(["read"]) == {"read": (1, (0,))}
  with pytest.raises(ValueError, match="slots"):
    pl.PipelineConfig(methods.clic.STEP, 4, period=2, slots=(2,))


@pytest.mark.parametrize("clip_every", [1, 2])
def test_each_row_once_per_epoch_alternately(clean, tok, tagger, clip_every):
  n = len(clean)
  assert n % B == 0 and n // B >= 6
  ran = _run(_pipes(clean, tok, tagger, clip_every), 0, n // B, clip_every)
  kinds = [k for k, *_ in ran]
  assert kinds == [_kind(g, clip_every) for g in range(n // B)]
  assert kinds[:3] == (["clic", "clic_clip", "clic"] if clip_every == 1 else ["clic", "clic", "clic_clip"])
  for g, (_, _, _, pos) in enumerate(ran):  # step g is global batch g of the shared order
    np.testing.assert_array_equal(pos, np.arange(g * B, (g + 1) * B))
  records = np.concatenate([r for *_, r, _ in ran])
  assert sorted(records.tolist()) == list(range(n))  # every row exactly once, over both kinds
  # each batch really is built from its records: CLIP rows are the first sentence of the record, CLIC rows start
  # their p1 with it (texts lower-cased by the source)
  for kind, batch, recs, _ in ran:
    for row, r in enumerate(recs):
      first = clean[int(r)]["sentences"][0]
      want = tok([first])[0] if kind == "clic_clip" else tok([first + "."])[0]
      got = batch["ids"][row, 0]
      if kind == "clic_clip":
        np.testing.assert_array_equal(got, want)
      else:  # p1 = "a. b." begins with a's tokens
        m = int(np.argmax(want == tok.eot_id))
        np.testing.assert_array_equal(got[:m], want[:m])
  for k, (kind, batch, _, _) in enumerate(ran[:2]):
    assert batch["ids"].shape == ((B, 5, 77) if kind == "clic" else (B, 1, 77))
  for p in _pipes(clean, tok, tagger, clip_every).values():  # the epoch is used up: both pipelines end
    with pytest.raises(StopIteration):
      for _ in range(n):
        next(p)


def test_resume_mid_epoch_is_exact(clean, tok, tagger):
  a = _pipes(clean, tok, tagger, num_epochs=None)
  _run(a, 0, 3)
  state = json.loads(json.dumps({k: p.state() for k, p in a.items()}))  # as checkpointed
  rest = _run(a, 3, 10)  # crosses the epoch boundary (6 batches per epoch)
  b = _pipes(clean, tok, tagger, num_epochs=None)
  for k, p in b.items():
    p.restore(state[k])
  _same(_run(b, 3, 10), rest)
  uninterrupted = _run(_pipes(clean, tok, tagger, num_epochs=None), 0, 10)
  _same(uninterrupted[3:], rest)


def test_global_batches_do_not_depend_on_the_process_count(clean, tok, tagger):
  one = _run(_pipes(clean, tok, tagger), 0, 4)
  hosts = [_run(_pipes(clean, tok, tagger, process_index=p, process_count=2), 0, 4) for p in range(2)]
  for g in range(4):
    (kind, batch, recs, pos), h0, h1 = one[g], hosts[0][g], hosts[1][g]
    assert h0[0] == h1[0] == kind
    np.testing.assert_array_equal(np.concatenate([h0[2], h1[2]]), recs)
    np.testing.assert_array_equal(np.concatenate([h0[3], h1[3]]), pos)
    for k in batch:
      np.testing.assert_array_equal(np.concatenate([h0[1][k], h1[1][k]]), batch[k])


def test_skips_are_refilled_within_their_own_kind(broken, tok, tagger):
  src, bad = broken
  pipes = _pipes(src, tok, tagger)
  ran = []
  for g in range(len(src)):  # until the pipeline of step g's kind runs out (the epoch is used up)
    try:
      ran += _run(pipes, g, g + 1)
    except StopIteration:
      break
  assert len(ran) >= 4
  skipped = sum(sum(p.skips.skipped.values()) for p in pipes.values())
  assert skipped == len(bad)  # every broken image was met once, by one of the two pipelines
  records = np.concatenate([r for *_, r, _ in ran])
  assert len(set(records.tolist())) == len(records)  # no row twice in the epoch
  for kind, _, _, pos in ran:  # a refill comes from a later batch of the same kind, never from the other's
    assert all(_kind(int(q) // B, 1) == kind for q in pos)
  # a resumed run sees the same batches after a skip as an uninterrupted one
  a = _pipes(src, tok, tagger, num_epochs=None)
  _run(a, 0, 2)
  state = {k: p.state() for k, p in a.items()}
  rest = _run(a, 2, 6)
  b = _pipes(src, tok, tagger, num_epochs=None)
  for k, p in b.items():
    p.restore(state[k])
  _same(_run(b, 2, 6), rest)


def test_training_builds_one_stream(tmp_path):
  """train.setup wires the pipelines so (CLIC :runlocal, 64 rows, batch 8): 8 steps use 64 distinct rows."""
  from compclip_jax.train import loop as train
  from configs import clic
  from tests import worlds
  c = clic.get_config("runlocal")
  c.evals.benchmarks = ()
  t = train.setup(worlds.use_shared_world(c), str(tmp_path))
  seen, kinds = [], []
  for g in range(8):
    kind = t.method.kind_at(c, g).name
    next(t.pipes[kind])
    kinds.append(kind)
    seen += t.pipes[kind].last_records.tolist()
  assert kinds == ["clic", "clic_clip"] * 4
  assert sorted(seen) == list(range(64))


def test_restoring_another_stream_is_refused(clean, tok, tagger, caplog):
  a = _pipes(clean, tok, tagger)
  _run(a, 0, 2)
  state = json.loads(json.dumps(a["clic"].state()))
  other = _pipes(clean, tok, tagger, seed=6)["clic"]
  with pytest.raises(ValueError, match="alternation of step kinds"):
    other.restore(state)
  with pytest.raises(ValueError, match="slots"):
    _pipes(clean, tok, tagger, clip_every=2)["clic"].restore(state)
  old = {k: v for k, v in state.items() if k != "layout"}  # a checkpoint of the two-stream version
  _pipes(clean, tok, tagger)["clic"].restore(old)
  assert "without a layout" in caplog.text
