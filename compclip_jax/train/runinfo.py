"""A workdir is one run: what made it (`run.json`, `config.json`) and who is running it (`lock.json`).

On the first start training writes the resolved config and a fingerprint of everything that defines the run — method,
the model's initial weights and parameter shapes, the trainable set, the data file and its record count, batch size,
schedule length, seed, and every config value that changes the maths — into the workdir. A rerun compares: identical
→ resume; different → `RunMismatch` listing each difference and the ways out (a new workdir, or
`--allow_config_change=KEY,…` for differences that a checkpoint can continue with, e.g. more steps). Differences in
the method, the parameter shapes or the trainable set cannot be continued at all.

The lock keeps two live processes from training in one workdir: the one that holds it is named (host, pid), a lock
whose process is gone (same host) or whose heartbeat is older than `STALE_S` (another host) is taken over.
"""
from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import socket
import time

from compclip_jax import compat
from compclip_jax.data import tfds_source
from compclip_jax.errors import UserError

RUN_FILE, CONFIG_FILE, LOCK_FILE = "run.json", "config.json", "lock.json"
FORMAT = 1
# Config values that do not change what is trained (logging, evaluation, checkpoint cadence, export, layout, speed):
# they may differ between starts of one run. Prefixes match dotted keys.
NEUTRAL = (
    "log_every",
    "peak_flops",
    "evals.",
    "checkpoint.",
    "loop.",
    "export.",
    "data.num_workers",
    "data.max_skip_fraction",
    "data.trim_tokens",
    "mesh.",
    "model.remat_text",
    "model.remat_vision",
    "model.remat_policy",
    "model.scan_layers",
    "model.pad_tokens_to",
    # represented by the resolved values of the fingerprint (total_steps) or there under the same name
    "num_epochs",
    "drop_last")
# Differences no checkpoint can continue with: another model, another optimiser state tree, other data pipelines.
# (and the keys a method's config section lists as `fixed`, e.g. its alternation of step kinds: `check(fixed=…)`)
FIXED = ("method", "model.params", "optim.trainable_set")
KERNEL_LAYOUT = "out_in"  # dense kernels as torch stores them (compclip_jax/models/layers.py)
STALE_S = 15 * 60  # a lock from another host whose heartbeat is older than this is abandoned


class RunMismatch(UserError, ValueError):
  """The workdir holds another run (user error: the message lists the differences and the ways out)."""


class WorkdirBusy(UserError, RuntimeError):
  """Another live process trains in this workdir."""


class WorkdirError(UserError, ValueError):
  """The workdir cannot be used: not writable, or it holds results no recorded run wrote."""


# ------------------------------------------------------------------------------------------------- fingerprint
def file_identity(path: str) -> dict | None:
  """{size, mtime} of a file, or of every file under a directory (count, total size, newest mtime, digest of the
  names, sizes and mtimes); None when `path` is empty. A rewritten data file or weight file shows as a change."""
  if not path:
    return None
  if os.path.isfile(path):
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime": round(st.st_mtime, 3)}
  if not os.path.isdir(path):
    return {"path": os.path.abspath(path), "missing": True}
  h, count, size, newest = hashlib.sha256(), 0, 0, 0.0
  for root, dirs, files in os.walk(path):
    dirs.sort()
    for name in sorted(files):
      st = os.stat(os.path.join(root, name))
      rel = os.path.relpath(os.path.join(root, name), path)
      h.update(f"{rel}\0{st.st_size}\0{st.st_mtime:.3f}\n".encode())
      count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime)
  return {
      "path": os.path.abspath(path), "files": count, "size": size, "mtime": round(newest, 3), "digest": h.hexdigest()
                                                                                                        [:16]
  }


def _digest(obj) -> str:
  return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _flatten(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _jsonable(x):
  """Tuples → lists etc., exactly as a JSON round trip gives them back (so fresh and stored values compare)."""
  return json.loads(json.dumps(x, default=str))


def describe(config: dict, *, param_shapes: dict, trainable: list[str], data_records: int, total_steps: int,
             neutral: tuple[str, ...] = ()) -> dict:
  """The flat {key: value} that identifies a run.

  config: `ConfigDict.to_dict()`; param_shapes: {dotted path: (shape, dtype)} of every parameter, frozen ones too;
  trainable: the trainable paths; data_records: records the source holds; total_steps: the resolved schedule length;
  neutral: more keys (or prefixes) that may differ between starts, besides NEUTRAL (a method section's own).
  """
  flat = {k: v for k, v in _flatten(config).items() if not k.startswith(NEUTRAL + tuple(neutral))}
  c = config
  flat["total_steps"] = int(total_steps)
  shapes = {k: [list(s), str(d)] for k, (s, d) in sorted(param_shapes.items())}
  # The layout is part of what a checkpoint holds: a square kernel [in, out] (compat.py) has the shape of one
  # [out, in], so only this field tells a workdir of the older layout from one of today's (models/layers.py).
  flat["model.params"] = {"count": len(param_shapes), "digest": _digest(shapes), "kernel_layout": KERNEL_LAYOUT}
  flat["optim.trainable_set"] = {"count": len(trainable), "digest": _digest(sorted(trainable))}
  for key in [k for k in flat if k == "init" or k.endswith(".init")]:  # model.init, a method's own checkpoints
    flat[f"{key}_files"] = file_identity(flat[key])
  if c["data"]["source"] == "tfds":  # a TFDS dataset: its dataset_info.json (rewritten when the data is)
    flat["data.files"] = file_identity(tfds_source.info_path(c["data"]["tfds_name"], c["data"]["tfds_data_dir"]))
  elif c["data"]["source"] != "synthetic":  # a synthetic world is defined by its size and seed, compared above
    flat["data.files"] = file_identity(c["data"]["path"])
  flat["data.records"] = int(data_records)
  return _jsonable(flat)


def differences(old: dict, new: dict) -> list[tuple[str, object, object]]:
  """(key, stored, now) for every key recorded on both sides whose value differs, sorted by key."""
  return [(k, old[k], new[k]) for k in sorted(set(old) & set(new)) if old[k] != new[k]]


def unmatched(old: dict, new: dict) -> list[str]:
  """Keys recorded on one side only: a config key or fingerprint entry added or removed by another version of this
  code. They cannot be compared, so they are reported (a warning) rather than refused."""
  return sorted(set(old) ^ set(new))


def _allowed(key: str, allow: tuple[str, ...]) -> bool:
  return any(key == a or key.startswith(a + ".") for a in allow)


def _show(v) -> str:
  s = json.dumps(v, sort_keys=True)
  return s if len(s) <= 100 else s[:97] + "..."


def check(diffs: list, allow: tuple[str, ...], workdir: str, fixed_keys: tuple[str, ...] = ()) -> list:
  """Raises RunMismatch unless every difference is allowed (a key of FIXED or `fixed_keys` never is); returns the
  (allowed) differences."""
  if not diffs:
    return []
  never = FIXED + tuple(fixed_keys)
  fixed = [d for d in diffs if d[0] in never]
  refused = [d for d in diffs if not _allowed(d[0], allow) or d[0] in never]
  if not refused:
    return diffs
  lines = [
      f"{workdir} holds another run: {len(diffs)} difference(s) from what it was started with "
      f"({os.path.join(workdir, RUN_FILE)}):"
  ]
  lines += [
      f"  {k}: was {_show(a)}, now {_show(b)}" + ("  [cannot be continued]" if k in never else "") for k, a, b in diffs
  ]
  lines.append("Nothing was changed in the workdir. Ways out:")
  lines.append("  - start this config in a new --workdir (the old run stays as it is);")
  if not fixed:
    keys = ",".join(k for k, _, _ in refused)
    lines.append(f"  - or, if the checkpoint should continue under the new values, rerun with "
                 f"--allow_config_change={keys}")
  else:
    lines.append(f"  - {', '.join(k for k, _, _ in fixed)} cannot change within a run: a checkpoint of one model "
                 "or method does not continue as another")
    if any(
        k == "model.params" and isinstance(a, dict) and a.get("kernel_layout") != KERNEL_LAYOUT for k, a, _ in fixed):
      lines.append(compat.OLD_KERNEL_LAYOUT_WAY_OUT)
  raise RunMismatch("\n".join(lines))


def load(workdir: str) -> dict | None:
  path = os.path.join(workdir, RUN_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _write_json(path: str, obj) -> None:
  tmp = f"{path}.tmp.{os.getpid()}"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=2, sort_keys=True, default=str)
    f.write("\n")
  os.replace(tmp, path)  # atomic: a reader sees the old file or the new one


def record(workdir: str, identity: dict, config_json: str, previous: dict | None, changes: list, step: int) -> None:
  """Writes run.json (identity, history of accepted changes) and config.json (the config of this start)."""
  history = list((previous or {}).get("changes", []))
  if changes:
    history.append(
        {"at_step": step, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "changed": {k: [a, b] for k, a, b in changes}})
  _write_json(
      os.path.join(workdir, RUN_FILE), {
          "format": FORMAT, "created": (previous or {}).get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
          "identity": identity, "changes": history
      })
  tmp = os.path.join(workdir, f"{CONFIG_FILE}.tmp.{os.getpid()}")
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(config_json + "\n")
  os.replace(tmp, os.path.join(workdir, CONFIG_FILE))


def check_writable(workdir: str) -> None:
  """Raises WorkdirError (not a traceback deep inside orbax) when `workdir` cannot be created or written."""
  probe = os.path.join(workdir, f".write_probe.{os.getpid()}")
  try:
    os.makedirs(workdir, exist_ok=True)
    with open(probe, "w", encoding="utf-8") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as e:
    what = {
        errno.EROFS: "is on a read-only file system", errno.EACCES: "is not writable by this user",
        errno.EPERM: "is not writable by this user"
    }.get(e.errno, f"cannot be written ({e.strerror})")
    raise WorkdirError(f"workdir {workdir} {what}: give a --workdir this user can write to") from None


# --------------------------------------------------------------------------------------------------------- lock
def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # exists, owned by someone else
    return True
  return True


class Lock:
  """`<workdir>/lock.json` held by the training process (process 0 of a multi-process run)."""
  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self.held = False
    self._beat = 0.0

  def holder(self) -> dict | None:
    """The live holder's record, or None when the lock is free or stale (a stale one is logged)."""
    try:
      with open(self.path, encoding="utf-8") as f:
        info = json.load(f)
      age = time.time() - os.stat(self.path).st_mtime
    except (OSError, ValueError):
      return None
    if info.get("host") == socket.gethostname():
      if info.get("pid") == os.getpid() or not _alive(int(info.get("pid", 0))):
        logging.warning("taking over the lock of process %s (no longer running) in %s", info.get("pid"), self.path)
        return None
      return info
    if age > STALE_S:
      logging.warning("taking over the lock of %s:%s in %s: no heartbeat for %.0f min", info.get("host"),
                      info.get("pid"), self.path, age / 60)
      return None
    return info

  def acquire(self) -> None:
    info = self.holder()
    if info is not None:
      raise WorkdirBusy(
          f"{os.path.dirname(self.path)} is in use: training process {info.get('pid')} on {info.get('host')} "
          f"(started {info.get('started')}) holds {self.path}. Wait for it, stop it (SIGTERM writes a checkpoint), "
          "or use another --workdir; if that process is gone for sure, delete the lock file.")
    _write_json(self.path,
                {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    self.held, self._beat = True, time.time()

  def heartbeat(self, every_s: float = 60.0) -> None:
    """Refreshes the lock's mtime (at most every `every_s`), so that another host sees it is alive."""
    if self.held and time.time() - self._beat >= every_s:
      try:
        os.utime(self.path)
      except OSError:
        pass
      self._beat = time.time()

  def release(self) -> None:
    if not self.held:
      return
    self.held = False
    try:
      with open(self.path, encoding="utf-8") as f:
        mine = json.load(f).get("pid") == os.getpid()
      if mine:
        os.remove(self.path)
    except (OSError, ValueError):
      pass
