"""Finding the training configs by name, in a checkout and in an installed package alike, and reading older command
lines.

`configs/` stays at the repository's top level (the project's layout); `pip install .` ships the same files inside
the package as `compclip_jax/_configs/` (pyproject's package-dir). The config files import only `compclip_jax`, so
a config is found by its path and nothing else: no import-path tricks.

`--config` accepts `clic`, `clic:runlocal` (a name in that folder, with its argument) and, as before, a path
`configs/clic.py[:arg]`; `resolve_argv` rewrites names to paths before absl parses the flags, and older flat config
keys (`--config.loss.w_rec`, `--config.t5.init`, …, now in the methods' sections) to today's, with one warning line,
then loads the config once to check it (`check_argv`): a config file that does not exist (listing those there are),
an unknown `:arg` and a mistyped `--config.KEY` (naming the nearest key) are one line and exit 2, not the traceback
ml_collections would print.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import types

import ml_collections

from compclip_jax import methods
from compclip_jax.errors import UserError
from compclip_jax.train import config as config_lib

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def configs_dir() -> str:
  """The checkout's `configs/` when this package runs from a checkout, else the copy installed with it."""
  checkout = os.path.join(os.path.dirname(_PACKAGE), "configs")
  if os.path.exists(os.path.join(checkout, "__init__.py")):
    return checkout
  return os.path.join(_PACKAGE, "_configs")


def names() -> list[str]:
  d = configs_dir()
  return sorted(f[:-3] for f in os.listdir(d) if f.endswith(".py") and f != "__init__.py")


def load(name: str) -> types.ModuleType:
  """The config module `name` ('clic', 'read', …), from a checkout or the installed package, loaded from its path."""
  if name not in names():
    raise UserError(f"no config named {name!r} (known: {', '.join(names())})")
  spec = importlib.util.spec_from_file_location(f"compclip_config_{name}", os.path.join(configs_dir(), f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _listing(folder: str) -> str:
  """The configs in `folder` (or, where it holds none, the known ones) as the end of a message."""
  here = sorted(f for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py") \
      if os.path.isdir(folder) else []
  if here:
    return f"the configs in {folder} are {', '.join(here)}"
  return f"the configs are {', '.join(names())} (--config=NAME[:arg], or a path such as configs/clic.py)"


def load_spec(spec: str):
  """The ConfigDict of a resolved `--config` value `path[:arg]`, loaded as ml_collections will load it. Raises
  UserError for a missing file, a file that fails to load (any exception, named in one line), a file without
  get_config or a ConfigError of its (an unknown `:arg`)."""
  path, sep, arg = spec.partition(":")
  if not os.path.isfile(path):
    raise UserError(f"--config={spec}: {path} does not exist; {_listing(os.path.dirname(path) or '.')}")
  spec_ = importlib.util.spec_from_file_location("compclip_config_check", path)
  module = importlib.util.module_from_spec(spec_)
  try:
    spec_.loader.exec_module(module)
  except Exception as e:  # pylint: disable=broad-except
    raise _failed(spec, path, e) from None
  if not hasattr(module, "get_config"):
    raise UserError(f"--config={spec}: {path} has no get_config(): not a config file; {_listing(configs_dir())}")
  try:
    return module.get_config(arg) if sep else module.get_config()
  except config_lib.ConfigError as e:
    raise UserError(f"--config={spec}: {e}") from None
  except Exception as e:  # pylint: disable=broad-except
    raise _failed(spec, path, e) from None


def _failed(spec: str, path: str, e: Exception) -> UserError:
  """A config file that raised while loading (a SyntaxError, a KeyError in get_config): one line naming it."""
  what = " ".join(str(e).split())
  return UserError(f"--config={spec}: {path} failed to load: {type(e).__name__}: {what}")


def _config_value(argv: list[str]) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a[len("--config="):]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def check_argv(argv: list[str]) -> None:
  """Loads the config `argv`'s --config names (when it names one) and checks each `--config.KEY=…` names a key
  of it (`config_lib.key_problem`). Raises UserError."""
  spec = _config_value(argv)
  if spec is None:
    return
  c = load_spec(spec)
  for a in argv:
    if a.startswith("--config.") and isinstance(c, ml_collections.ConfigDict):
      key = a[len("--config."):].partition("=")[0]
      problem = config_lib.key_problem(c, key)
      if problem:
        raise UserError(f"--config.{key}: {problem}")


def resolve(spec: str) -> str:
  """`--config` value → what ml_collections' config_flags loads: an existing path is kept; a bare name (`clic`,
  `clic:runlocal`) becomes the path of that file in `configs_dir()`. Unknown names raise UserError listing the
  known ones."""
  path, sep, arg = spec.partition(":")
  if os.path.exists(path) or not _NAME.fullmatch(path):
    return spec
  target = os.path.join(configs_dir(), f"{path}.py")
  if not os.path.exists(target):
    raise UserError(f"--config={spec}: no config named {path!r} (known: {', '.join(names())}; or pass a path "
                    "such as configs/clic.py)")
  return target + sep + arg


def _renamed_arg(a: str, renamed, values, moved: list) -> str:
  """`--config.OLD=V` → `--config.NEW=V`; `--allow_config_change=OLD,…` → today's keys; an older schedule name."""
  if a.startswith("--config."):
    key, sep, value = a[len("--config."):].partition("=")
    new = config_lib.rename(key, renamed) or key
    if new != key:
      moved.append((key, new))
    newer = config_lib.new_value(new, value, values)
    if newer != value:
      moved.append((f"{new}={value}", f"{new}={newer}"))
      value = newer
    return f"--config.{new}{sep}{value}"
  if a.startswith("--allow_config_change="):
    keys = a.partition("=")[2].split(",")
    new = [config_lib.rename(k, renamed) or k for k in keys]
    moved += [(k, n) for k, n in zip(keys, new) if k != n]
    return "--allow_config_change=" + ",".join(new)
  return a


def migrate_argv(argv: list[str]) -> list[str]:
  """`argv` with older config keys read as today's (one warning line naming each)."""
  renamed, values, moved = methods.renamed_keys(), methods.renamed_values(), []
  out = [_renamed_arg(a, renamed, values, moved) for a in argv]
  if moved:
    logging.warning("the command line uses older config keys, read as today's: %s",
                    ", ".join(f"{a} → {b}" for a, b in moved))
  return out


def resolve_argv(argv: list[str]) -> list[str]:
  """`argv` with `--config=NAME[:arg]` (or `--config NAME`) resolved and older config keys renamed. For entry
  points: an unknown name, a missing config file or key exits with status 2 and one message (no traceback)."""
  out, it = [], iter(range(len(argv)))
  try:
    for i in it:
      a = argv[i]
      if a.startswith("--config="):
        a = "--config=" + resolve(a[len("--config="):])
      elif a == "--config" and i + 1 < len(argv):
        out.append(a)
        a = resolve(argv[next(it)])
      out.append(a)
    out = migrate_argv(out)
    check_argv(out)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    raise SystemExit(2) from None
  return out
