"""The recipes (configs/<name>.py) by name, in a checkout and in an installed package alike.

`configs/` stays at the repository's top level (the project's layout); `pip install .` ships the same files inside
the package as `compclip_jax/_configs/` (pyproject's package-dir). The config files import only `compclip_jax`, so
a config is found by its path and nothing else: no import-path tricks. `load(name).get_config(arg)` is the recipe
`--config=configs/<name>.py:arg` gives; `resolve` turns a `--config` value given by name (`clic`, `clic:runlocal`)
into that path; `load_spec` loads a resolved value as ml_collections will, a failure one UserError line.
"""
from __future__ import annotations

import importlib.util
import os
import re
import types

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
