"""The input pipeline on grain: index → sample (image work and lexical swaps on the host) → fixed-shape batches →
global `jax.Array`s.

- Reproducible: one shuffled, epoch-repeated order of records is shared by all hosts; each record's RNG comes from
  (seed, its position in that order), so (seed, step) determines every sample; the iterator state (`state()` /
  `restore()`) is checkpointed with the model.
- Multi-host: global batch g is positions [g·B, (g+1)·B) of the order; process p builds rows [p·B/P, (p+1)·B/P) of
  it. Hosts read disjoint positions that cover the data, and the global batch does not depend on the host count.
- The step kind (compclip_jax/methods/, `PipelineConfig.kind`) says what a record becomes: its sample builder, whether
  it takes a partner, whether it has a T5 target; the pipeline tokenises the sample's texts (CLIP), its "paraphrase"
  (CLIP) and its "target" (T5) whatever the kind.
- One order for all step kinds (METHODS §1.4): a method that alternates kinds has a pipeline per kind, but all read
  the same shuffled order, each taking its own global batches of it (`PipelineConfig.period` / `slots`, `interleave`):
  step g's batch is global batch g whatever its kind, so each row is used once per epoch, by one of them.
  A skipped record is refilled from the same kind's next positions, so a pipeline never reads another's rows.
- Partners (a kind whose sample takes a second record, METHODS §1.2 step 2): drawn uniformly from a bucket →
  indices table of same-orientation records.
- Bad records never stop a run and are never silent: the transform returns a skip marker, the main process counts it
  by reason (`SkipCounter`, which fails the run past `max_skip_fraction`) and fills the batch with the next sample.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
from typing import Any, Callable, Iterator, Protocol, Sequence

import grain
import numpy as np
from absl.flags import UnparsedFlagAccessError

from compclip_jax.data import samples
from compclip_jax.data.negatives import SpacyTagger
from compclip_jax.data.records import MAX_SKIP_FRACTION, BadRecord, SkipCounter
from compclip_jax.data.tokenizers import CLIPTokenizer, T5Tokenizer


class StepKind(Protocol):
  """What the pipeline reads of a method's step kind (compclip_jax/methods/base.StepKind satisfies it; the data
  layer does not import the methods, which import it)."""
  name: str  # keys the layout and the data state
  sample: Callable  # (record, partner or None, rng, tagger, options) → {"image", "texts", …}
  partner: Callable[[Any], bool]  # (options) → whether a sample takes a partner record
  t5_target: bool  # the sample has a "target" caption for the decoder's tokenizer
  min_sentences: int  # records with fewer sentences are skipped


PARTNER_RETRIES = 3


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  kind: StepKind  # a method's step kind (compclip_jax/methods/); its name keys the layout and the data state
  batch_size: int  # global batch; each process builds batch_size / process_count
  seed: int = 0
  num_epochs: int | None = None  # None: repeat forever
  # grain worker processes (0: in the main process); > 0 needs absl flags parsed (python -m compclip_jax.main does;
  # elsewhere call absl.flags.FLAGS.mark_as_parsed() first: grain reads one of its flags when the workers start)
  num_workers: int = 0
  max_skip_fraction: float = MAX_SKIP_FRACTION
  t5_max_length: int = 77
  options: samples.ImageOptions = samples.ImageOptions()  # the kind's (`StepKind.options`): what `sample` gets
  # Of every `period` consecutive global batches of the shuffled order, this pipeline builds those at `slots`
  # (`interleave`); pipelines that share an order need the same seed, batch size and num_epochs.
  period: int = 1
  slots: tuple[int, ...] = (0,)

  def __post_init__(self):
    if not callable(getattr(self.kind, "sample", None)):
      raise TypeError(f"pipeline kind {self.kind!r}: a compclip_jax.methods StepKind (methods.step_kind(name))")
    if not self.slots or list(self.slots) != sorted(set(self.slots)) or not 0 <= self.slots[0] <= self.slots[-1] \
        < self.period:
      raise ValueError(f"pipeline slots {self.slots} of period {self.period}: need sorted distinct slots in "
                       f"[0, {self.period})")


def interleave(cycle: Sequence[str]) -> dict[str, tuple[int, tuple[int, ...]]]:
  """Step kinds of one period of a schedule (kind names, in the order the steps run them) → {kind: (period, slots)} for
  `PipelineConfig`: step g takes global batch g of the one shared order from the pipeline of kind cycle[g % period].
  """
  return {k: (len(cycle), tuple(i for i, x in enumerate(cycle) if x == k)) for k in dict.fromkeys(cycle)}


def partner_table(wide: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(indices of wide records, indices of tall records); records of unknown orientation (-1) are in neither."""
  return np.flatnonzero(wide == 1), np.flatnonzero(wide == 0)


class SampleTransform:
  """(index, rng) → one sample of `kind` as fixed-shape numpy arrays, or {"skip": reason, "detail": …}.

  Picklable for grain workers: spaCy and the tokenizers rebuild themselves in each worker process.
  """
  def __init__(self, source, cfg: PipelineConfig, tokenizer: CLIPTokenizer, t5_tokenizer: T5Tokenizer | None = None,
               tagger: SpacyTagger | None = None):
    if cfg.kind.t5_target and t5_tokenizer is None:
      raise ValueError(f"the {cfg.kind.name} pipeline needs the T5 tokenizer (the decoder checkpoint's spiece.model)")
    self.source, self.cfg, self.tok, self.t5 = source, cfg, tokenizer, t5_tokenizer
    self.tagger = tagger or SpacyTagger()
    self.buckets = partner_table(np.asarray(source.wide)) if cfg.kind.partner(cfg.options) else None

  def _record(self, i: int) -> dict:
    rec = self.source.materialize(self.source[int(i)])
    if len(rec["sentences"]) < self.cfg.kind.min_sentences:
      raise BadRecord(
          "too_few_sentences", f"record {rec['id']}: {len(rec['sentences'])} sentence(s), the "
          f"{self.cfg.kind.name} step needs {self.cfg.kind.min_sentences}")
    return rec

  def _partner(self, i: int, rng: np.random.Generator) -> dict:
    bucket = self.buckets[0] if self.source.wide[i] == 1 else self.buckets[1]
    last = None
    for _ in range(PARTNER_RETRIES):
      try:
        return self._record(bucket[rng.integers(len(bucket))])
      except BadRecord as e:  # a partner that turns out unreadable: draw another
        last = e
    raise BadRecord("no_readable_partner", f"record {i}: {PARTNER_RETRIES} partners failed, last: {last}")

  def __call__(self, index: int, rng: np.random.Generator) -> dict:
    try:
      rec = self._record(index)
      return self._build(index, rec, rng)
    except BadRecord as e:
      return {"skip": e.reason, "detail": e.detail}

  def _build(self, index: int, rec: dict, rng: np.random.Generator) -> dict:
    partner = self._partner(index, rng) if self.buckets is not None else None  # drawn before the sample's own
    s = self.cfg.kind.sample(rec, partner, rng, self.tagger, self.cfg.options)
    ids, truncated = self.tok.encode(s["texts"])  # one cleaning + BPE pass (an empty text is never truncated)
    out = {"image": s["image"], "ids": ids, "truncated": np.int32(truncated)}
    if "neg_valid" in s:
      out["neg_valid"] = np.asarray(s["neg_valid"], bool)
      out["neg_kind"] = [str(k) for k in np.atleast_1d(s["neg_kind"])]  # one per sample, or one per negative
    if "paraphrase" in s:
      out["para_ids"] = self.tok([s["paraphrase"]])[0]
    if self.cfg.kind.t5_target:  # the decoder's input is this shifted right, on device (models/t5.shift_right)
      out["t5_target"] = self.t5([s["target"]], self.cfg.t5_max_length)[0]
    return out


class _LocalPositions:
  """Local index k → global position q in the epoch-repeated order, such that global batch g is positions
  [g·B, (g+1)·B) and process p builds rows [p·Bl, (p+1)·Bl) of it (Bl = B / P). The global batch is therefore the
  same whatever the number of processes. With `period` / `slots`, this pipeline's j-th batch is global batch
  g = (j // len(slots))·period + slots[j % len(slots)] (the others belong to the pipelines of other step kinds)."""
  def __init__(self, global_batch: int, process_index: int, process_count: int, period: int = 1,
               slots: Sequence[int] = (0,)):
    self.b, self.bl, self.p = global_batch, global_batch // process_count, process_index
    self.period, self.slots = period, tuple(slots)

  def batch(self, j: int) -> int:
    """The global batch index of this pipeline's j-th batch."""
    cycles, r = divmod(j, len(self.slots))
    return cycles * self.period + self.slots[r]

  def __call__(self, k: int) -> int:
    return self.batch(k // self.bl) * self.b + self.p * self.bl + k % self.bl

  def count(self, n: int) -> int:
    """How many of the positions [0, n) are this process's (and this pipeline's)."""
    full, rem = divmod(n, self.b)  # global batches 0..full-1 complete, batch `full` has rem positions
    cycles, r = divmod(full, self.period)
    batches = cycles * len(self.slots) + sum(s < r for s in self.slots)
    partial = min(max(rem - self.p * self.bl, 0), self.bl) if r in self.slots else 0
    return batches * self.bl + partial


class _SampleAt:
  """Global position q → sample of record order[q], with the record's RNG from (seed, q): q encodes the epoch and
  the place in it, so every sample is a function of (seed, position), on any host and in any worker."""
  def __init__(self, order, transform: SampleTransform, seed: int):
    self.order, self.transform, self.seed = order, transform, seed

  def __call__(self, q: int) -> dict:
    index = self.order[q]
    out = self.transform(index, np.random.default_rng([self.seed, q]))
    out["record"], out["position"] = np.int64(index), np.int64(q)  # host-side bookkeeping (`Batches.last_records`)
    return out


def make_dataset(source, cfg: PipelineConfig, tokenizer: CLIPTokenizer, t5_tokenizer: T5Tokenizer | None = None,
                 process_index: int = 0, process_count: int = 1, tagger: SpacyTagger | None = None):
  """The grain IterDataset of this process's per-sample dicts (skip markers included)."""
  if cfg.batch_size % process_count:
    raise ValueError(f"global batch {cfg.batch_size} is not divisible by the {process_count} processes")
  order = grain.MapDataset.range(len(source)).shuffle(seed=cfg.seed).repeat(cfg.num_epochs)
  positions = _LocalPositions(cfg.batch_size, process_index, process_count, cfg.period, cfg.slots)
  transform = SampleTransform(source, cfg, tokenizer, t5_tokenizer, tagger)
  ds = grain.MapDataset.range(positions.count(len(order))).map(positions).map(_SampleAt(order, transform, cfg.seed))
  it = ds.to_iter_dataset()
  if cfg.num_workers > 0:
    # grain reads its absl flag --grain_enable_multiprocess_worker_profiling here in the parent, so absl flags must be
    # parsed: an entry point's job (app.run in main.py; tests/conftest.py `absl_flags_parsed`), not this library's.
    it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=cfg.num_workers, per_worker_buffer_size=4))
  return it


class Batches:
  """Iterator of local batches (dicts of stacked numpy arrays); counts skips, negative kinds and truncations.

  `state()` is exact at batch boundaries: restoring it continues with the same batches an uninterrupted run sees.
  `last_records` / `last_positions`: the record indices and order positions of the last batch's rows (host side).
  """
  def __init__(self, dataset, local_batch: int, max_skip_fraction: float = MAX_SKIP_FRACTION,
               layout: dict | None = None):
    self._ds, self.local_batch = dataset, local_batch
    self.layout = layout or {}  # which positions of which order this pipeline reads; checked on restore
    self._it: Any = iter(dataset)
    self.skips = SkipCounter(max_skip_fraction)
    self.neg_kinds: collections.Counter = collections.Counter()
    self.truncated = 0
    self.last_records = self.last_positions = np.zeros(0, np.int64)

  def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    items, records, positions = [], [], []
    while len(items) < self.local_batch:
      try:
        x = next(self._it)
      except UnparsedFlagAccessError as e:  # raised by grain as its worker processes start (make_dataset)
        raise RuntimeError("data.num_workers > 0: grain reads its absl flags when its worker processes start, and "
                           "they are not parsed in this process; run through python -m compclip_jax.main (absl), "
                           "call absl.flags.FLAGS.mark_as_parsed() first, or set data.num_workers=0") from e
      record, position = x.pop("record", -1), x.pop("position", -1)
      if "skip" in x:
        self.skips.skip(x["skip"], x["detail"])
        continue
      self.skips.ok()
      self.truncated += int(x.pop("truncated"))
      if "neg_kind" in x:
        self.neg_kinds.update(x.pop("neg_kind"))
      items.append(x)
      records.append(record)
      positions.append(position)
    self.last_records, self.last_positions = np.array(records, np.int64), np.array(positions, np.int64)
    return {k: np.stack([x[k] for x in items]) for k in items[0]}

  def state(self) -> dict:
    return {
        "grain": self._it.get_state(), "skips": self.skips.state(), "neg_kinds": dict(self.neg_kinds),
        "truncated": self.truncated, "layout": self.layout
    }

  def restore(self, state: dict) -> None:
    saved = state.get("layout")
    if saved is None:
      logging.warning("pipeline state without a layout (written before alternating step kinds shared one order): "
                      "resuming it continues with other rows than the run that wrote it")
    elif json.loads(json.dumps(saved)) != json.loads(json.dumps(self.layout)):
      raise ValueError(f"the checkpointed pipeline read {saved}, this run reads {self.layout}: seed, batch size or "
                       "the alternation of step kinds changed, so resuming would not continue the same stream; use a "
                       "new workdir or the original settings")
    self._it = iter(self._ds)
    self._it.set_state(state["grain"])
    self.skips.restore(state["skips"])
    self.neg_kinds = collections.Counter(state["neg_kinds"])
    self.truncated = state["truncated"]

  def stats(self) -> dict:
    return {
        "skipped": sum(self.skips.skipped.values()), "seen": self.skips.seen, "truncated": self.truncated,
        **{f"neg/{k}": v for k, v in self.neg_kinds.items()}
    }


class GivenBatches:
  """The `Batches` interface over local batches handed in, in step order: a run fed the batches another
  implementation built (the trajectory tests feed the reference code's batches through `train.loop.run(…,
  batches=)`). Its state is the position in the list, so a checkpoint resumes at the next one."""
  def __init__(self, batches: Sequence[dict], max_skip_fraction: float = MAX_SKIP_FRACTION):
    self._batches, self._i = list(batches), 0
    self.skips = SkipCounter(max_skip_fraction)

  def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    if self._i >= len(self._batches):
      raise StopIteration(f"the run asked for batch {self._i + 1} of {len(self._batches)} given")
    batch = {k: np.asarray(v) for k, v in self._batches[self._i].items()}
    self._i += 1
    return batch

  def state(self) -> dict:
    return {"given": self._i}

  def restore(self, state: dict) -> None:
    self._i = int(state["given"])

  def stats(self) -> dict:
    return {"skipped": 0, "seen": self._i, "truncated": 0}


def make_batches(source, cfg: PipelineConfig, tokenizer: CLIPTokenizer, t5_tokenizer: T5Tokenizer | None = None,
                 process_index: int = 0, process_count: int = 1, tagger: SpacyTagger | None = None) -> Batches:
  ds = make_dataset(source, cfg, tokenizer, t5_tokenizer, process_index, process_count, tagger)
  layout = {
      "kind": cfg.kind.name, "seed": cfg.seed, "batch_size": cfg.batch_size, "num_epochs": cfg.num_epochs,
      "period": cfg.period, "slots": list(cfg.slots), "records": len(source)
  }
  return Batches(ds, cfg.batch_size // process_count, cfg.max_skip_fraction, layout)


TOKEN_KEYS = ("ids", "para_ids")


def text_length(batch: dict[str, np.ndarray], eot_id: int) -> int:
  """Longest caption of a local batch in tokens, EOT included (pad may be 0 or EOT itself)."""
  return max(int((np.argmax(batch[k] == eot_id, axis=-1)).max()) + 1 for k in TOKEN_KEYS if k in batch)


def trim_tokens(batch: dict[str, np.ndarray], length: int, bucket: int = 16) -> dict[str, np.ndarray]:
  """Cuts token arrays to `length` rounded up to a multiple of `bucket` (≤ their width), so the text tower does not
  run on padding. Exact: with causal attention the EOT token never sees what comes after it, and positions are
  absolute. A handful of bucket widths keeps recompilation bounded."""
  width = next(batch[k].shape[-1] for k in TOKEN_KEYS if k in batch)
  cut = min(width, -(-length // bucket) * bucket)
  return {k: (v[..., :cut] if k in TOKEN_KEYS else v) for k, v in batch.items()}


def to_global(batch: dict[str, np.ndarray], sharding) -> dict:
  """Local numpy batch → global jax.Arrays sharded on the batch axis (`jax.make_array_from_process_local_data`)."""
  import jax  # pylint: disable=import-outside-toplevel
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
