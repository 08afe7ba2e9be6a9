"""Bad input: the reasons a record is skipped, the counter that refuses to let skips go silent or unbounded, and the
run's one report of every record it drops (read-time rejects of the source and load-time skips of every pipeline).
"""
from __future__ import annotations

import collections
import json
import logging
import os
from typing import NamedTuple, Sequence

from compclip_jax.errors import UserError

SKIPPED_FILE = "skipped.jsonl"
# The share of unusable records a run accepts (data.max_skip_fraction's default); `prepare` refuses above it too.
MAX_SKIP_FRACTION = 0.05


class BadRecord(Exception):
  """A record that cannot become a sample; `reason` is a short key that is counted, `detail` names the file/row
  first (`"<name>: what is wrong"`)."""
  def __init__(self, reason: str, detail: str):
    super().__init__(f"{reason}: {detail}")
    self.reason, self.detail = reason, detail


class Rejected(NamedTuple):
  """A record dropped (or, for kept duplicates, only reported) when its source is read."""
  reason: str  # short key, counted: too_few_sentences, non_utf8, unsupported_extension, no_split, …
  where: str  # "rows.csv:12" (the line the row starts on) or "dataset.json: images[7] (cocoid 42, filename 'x.jpg')"
  detail: str  # what is wrong and what to do

  def __str__(self) -> str:
    return f"{self.where}: {self.detail}"


class TooManySkipped(UserError, RuntimeError):
  pass


class SkipCounter:
  """Counts skipped records by reason; past `max_fraction` of records seen it raises with example rows.

  The fraction is only enforced after `min_seen` records, so one bad row at the start does not stop a run. Attached
  to a `SkipReport` (`report.attach`), every skip is also recorded there, and the rows rejected when the source was
  read count against the limit too: the run fails when 1 − (1 − read fraction)(1 − load fraction) of the data, the
  share of rows that never become a sample, exceeds `max_fraction`.
  """
  def __init__(self, max_fraction: float = MAX_SKIP_FRACTION, min_seen: int = 100, examples_per_reason: int = 3):
    self.max_fraction, self.min_seen, self.k = max_fraction, min_seen, examples_per_reason
    self.seen, self.skipped = 0, collections.Counter()
    self.examples: dict[str, list[str]] = collections.defaultdict(list)
    self.report: SkipReport | None = None  # set by SkipReport.attach
    self.kind = ""

  def ok(self) -> None:
    self.seen += 1

  def skip(self, reason: str, detail: str) -> None:
    self.seen += 1
    self.skipped[reason] += 1
    if len(self.examples[reason]) < self.k:
      self.examples[reason].append(detail)
    if self.report is not None:
      self.report.record(self.kind, reason, detail)
    if self.skipped[reason] == 1:
      logging.warning(
          "skipping a record (%s): %s — further ones are counted, see the data summary at each "
          "checkpoint", reason, detail)
    self.check()

  def check(self) -> None:
    total = sum(self.skipped.values())
    load = total / self.seen if self.seen >= self.min_seen else 0.0
    read = self.report.read_fraction if self.report is not None else 0.0
    bad = 1.0 - (1.0 - read) * (1.0 - load)
    if total and bad > self.max_fraction:  # read-time rejects alone are checked when the source is read
      also = f" and {read:.1%} of the rows were rejected when read: {bad:.1%} of the data unusable" if read else ""
      where = f"; every one is listed in {self.report.path}" if self.report is not None and self.report.path else ""
      raise TooManySkipped(f"{total} of {self.seen} records skipped{also} (> {self.max_fraction:.1%}); fix the data "
                           f"or raise the limit (data.max_skip_fraction){where}.\n{self.summary()}")

  def summary(self) -> str:
    if not self.skipped:
      return f"no records skipped of {self.seen}"
    lines = [f"skipped {sum(self.skipped.values())} of {self.seen} records:"]
    for reason, n in self.skipped.most_common():
      lines.append(f"  {reason}: {n} (e.g. {'; '.join(self.examples[reason])})")
    return "\n".join(lines)

  def state(self) -> dict:
    return {"seen": self.seen, "skipped": dict(self.skipped), "examples": dict(self.examples)}

  def restore(self, state: dict) -> None:
    self.seen = state["seen"]
    self.skipped = collections.Counter(state["skipped"])
    self.examples = collections.defaultdict(list, {k: list(v) for k, v in state["examples"].items()})


def counts(reasons) -> str:
  """'reason n, …', the most frequent first (a skip summary's one line; prepare's too)."""
  return ", ".join(f"{r} {n}" for r, n in collections.Counter(reasons).most_common())


class SkipReport:
  """Every record a run drops, by reason, in one place.

  - Read time (`add_source`): the source's rejects (and kept duplicates) are logged with examples, written to `path`
    and checked against `max_fraction` at once: a file whose rows are mostly unusable fails before training starts.
  - Load time (`attach`): each pipeline's `SkipCounter` records its skips here; they are appended to `path` at every
    checkpoint (`checkpoint(step)`, lines tagged with that step) and at the end (`finish()`, tagged `"step": null`).
    A resumed run (`resumed(step)`) drops the lines after its checkpoint, which it is about to see again.
  - `summary()`: counts by reason, printed (by `echo`) at the end and at every checkpoint once anything was dropped.

  `path` lines are JSON: {"stage": "read" | "load", "source", "where", "reason", "detail"} (+ "step", "kind" for
  load-time skips, "kept": true for duplicates, which are reported only: the reference trains on them). On hosts
  other than the first (`for_workdir`), only load-time lines are written, to a file of their own.
  """
  def __init__(self, path: str | None, max_fraction: float = MAX_SKIP_FRACTION, examples_per_reason: int = 3,
               write_read: bool = True, echo=print):
    self.path, self.max_fraction, self.k = path, max_fraction, examples_per_reason
    self.write_read, self.echo = write_read, echo
    self.source = ""
    self.rejected: list[Rejected] = []
    self.kept: list[Rejected] = []
    self.n_read = 0
    self.counters: dict[str, SkipCounter] = {}
    self._pending: list[dict] = []
    self._earlier: list[dict] = []  # load-time lines of an earlier attempt of this run, read from `path`

  @classmethod
  def for_workdir(cls, workdir: str, max_fraction: float, process_index: int = 0, echo=print) -> SkipReport:
    name = SKIPPED_FILE if process_index == 0 else f"skipped.process-{process_index}.jsonl"
    return cls(os.path.join(workdir, name), max_fraction, write_read=process_index == 0,
               echo=echo if process_index == 0 else (lambda *_: None))

  # ------------------------------------------------------------------------------------------------ read time
  @property
  def read_fraction(self) -> float:
    return len(self.rejected) / self.n_read if self.n_read else 0.0

  def add_source(self, source) -> None:
    """Takes `source.read_rejects()` (rejected, records examined, kept-but-reported); logs, writes and checks them.

    Raises TooManySkipped when more than `max_fraction` of the records examined were rejected."""
    self.source = str(getattr(source, "path", None) or getattr(source, "directory", ""))
    rejected, n_read, kept = source.read_rejects() if hasattr(source, "read_rejects") else ([], len(source), [])
    self.rejected, self.n_read, self.kept = list(rejected), int(n_read), list(kept)
    self._earlier = self._read_load_lines()
    self._rewrite()
    if self.rejected:
      logging.warning("%s: %d of %d records rejected when read (%s); e.g.\n  %s\nall listed in %s", self.source,
                      len(self.rejected), self.n_read, counts(r.reason for r in self.rejected),
                      "\n  ".join(f"{r.reason}: {r}" for r in self._examples(self.rejected)), self.path)
    if self.kept:
      logging.warning("%s: %d duplicate row(s) kept, as the reference trains on them; e.g. %s", self.source,
                      len(self.kept), "; ".join(str(r) for r in self.kept[:self.k]))
    if self.n_read and self.read_fraction > self.max_fraction:
      raise TooManySkipped(
          f"{self.source}: {len(self.rejected)} of {self.n_read} records ({self.read_fraction:.1%}) cannot be used "
          f"(> data.max_skip_fraction {self.max_fraction:.1%}): {counts(r.reason for r in self.rejected)}; e.g.\n  " +
          "\n  ".join(f"{r.reason}: {r}" for r in self._examples(self.rejected)) +
          f"\nfix the data or raise data.max_skip_fraction; every rejected record is listed in {self.path}")

  def _examples(self, items: Sequence[Rejected]) -> list[Rejected]:
    """Up to k per reason, in file order."""
    seen: collections.Counter = collections.Counter()
    out = []
    for r in items:
      if seen[r.reason] < self.k:
        seen[r.reason] += 1
        out.append(r)
    return out

  # ------------------------------------------------------------------------------------------------ load time
  def attach(self, counter: SkipCounter, kind: str) -> None:
    counter.report, counter.kind = self, kind
    self.counters[kind] = counter

  def record(self, kind: str, reason: str, detail: str) -> None:
    self._pending.append({
        "stage": "load", "source": self.source, "where": detail.split(": ", 1)[0], "reason": reason, "detail": detail,
        "kind": kind
    })

  def mark(self) -> int:
    """A position in the load-time skips recorded since the last checkpoint, for `rewind`."""
    return len(self._pending)

  def rewind(self, mark: int) -> None:
    """Forgets the load-time skips recorded after `mark` (their batch was read ahead, then given back:
    train/loop.py)."""
    del self._pending[mark:]

  def resumed(self, step: int) -> None:
    """The run continues from checkpoint `step` (0: from scratch): lines recorded after it will be recorded again."""
    self._earlier = [d for d in self._earlier if isinstance(d.get("step"), int) and 0 < d["step"] <= step]
    self._pending = []
    self._rewrite()

  def checkpoint(self, step: int) -> str:
    """Appends the skips since the last checkpoint (tagged `step`) and echoes the summary (when anything was dropped
    so far: a clean run says so once, at the end); returns it."""
    self._flush(step)
    line = f"data at step {step}: {self.summary()}"
    if self.rejected or self.kept or any(c.skipped for c in self.counters.values()):
      self.echo(line)
    return line

  def finish(self) -> str:
    """At the end of the run (or when it stops early): appends what is left and echoes the summary."""
    self._flush(None)
    line = f"data at the end of the run: {self.summary()}"
    self.echo(line)
    return line

  def summary(self) -> str:
    """Counts by reason, read time and load time."""
    parts = []
    if self.rejected:
      parts.append(f"{len(self.rejected)} of {self.n_read} records rejected when read "
                   f"({counts(r.reason for r in self.rejected)})")
    else:
      parts.append(f"none of {self.n_read} records rejected when read")
    skipped = collections.Counter()
    seen = 0
    for c in self.counters.values():
      skipped.update(c.skipped)
      seen += c.seen
    if skipped:
      parts.append(f"{sum(skipped.values())} of {seen} samples skipped when loaded "
                   f"({', '.join(f'{r} {n}' for r, n in skipped.most_common())})")
    else:
      parts.append(f"none of {seen} samples skipped when loaded")
    if self.kept:
      parts.append(f"{len(self.kept)} duplicate rows kept")
    return "; ".join(parts) + (f" — details: {self.path}" if self.path and
                               (self.rejected or skipped or self.kept) else "")

  # ----------------------------------------------------------------------------------------------------- file
  def _read_lines(self) -> list[Rejected]:
    return self.rejected + self.kept

  def _read_load_lines(self) -> list[dict]:
    if not self.path or not os.path.exists(self.path):
      return []
    out = []
    with open(self.path, encoding="utf-8") as f:
      for line in f:
        try:
          d = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: the checkpoint it belonged to is replayed anyway
          continue
        if d.get("stage") == "load":
          out.append(d)
    return out

  def _rewrite(self) -> None:
    if not self.path:
      return
    lines = []
    if self.write_read:
      lines += [{
          "stage": "read", "source": self.source, "where": r.where, "reason": r.reason, "detail": r.detail,
          **({"kept": True} if r.reason == "duplicate_row" else {})
      } for r in self._read_lines()]
    lines += self._earlier
    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
    tmp = self.path + ".tmp"
    with open(tmp, "w", encoding="utf-8", errors="backslashreplace") as f:
      f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in lines)
    os.replace(tmp, self.path)

  def _flush(self, step: int | None) -> None:
    if not self._pending:
      return
    lines = [{**d, "step": step} for d in self._pending]
    self._pending = []
    if self.path:
      with open(self.path, "a", encoding="utf-8", errors="backslashreplace") as f:
        f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in lines)
    if step is not None:  # kept across a later rewrite of the file in this process
      self._earlier += lines
