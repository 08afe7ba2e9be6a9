"""What every entry point does the same way: a quiet console and user errors as one message.

- `quiet_logging(verbose)`: unless asked (absl's --verbosity / -v given), the console shows this package's own lines
  and everybody's warnings; absl, orbax, jax and XLA INFO lines (the libtpu "Unable to initialize backend" line too)
  stay off, and the C++ runtimes' INFO logs are silenced through their environment variables (call it before the
  first jax computation).
- `guard(main)`: wraps an absl `main(argv)`. A user error — `compclip_jax.errors.UserError` (any subclass), or a
  read-only / permission-denied / missing file — prints one message on stderr and exits 2; another exception with an
  integer `exit_code` (training's signal stop: 130 for SIGINT, 143 for SIGTERM; a diverged loss: 3) prints its
  message and exits with that code.
  COMPCLIP_TRACEBACK=1 in the environment lets every exception through with its traceback.

Usage in an entry point: `app.run(cli.guard(main))`, and `cli.quiet_logging(cli.verbosity_given())` first in main.
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import sys

from compclip_jax.errors import EXIT_USER_ERROR, UserError

EXIT_DIVERGED = 3
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
# A missing or unreadable input file is the user's to fix too (the message names it).
USER_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # compclip_jax/, every module of it


class _OwnLinesOrWarnings(logging.Filter):
  """Passes WARNING and above from anyone, and INFO from this package (its modules log through the root logger)."""
  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.WARNING:
      return True
    return record.name.startswith("compclip_jax") or (record.name == "root" and
                                                      os.path.abspath(record.pathname).startswith(PACKAGE_DIR))


def verbosity_given() -> bool:
  """Whether absl's --verbosity (or -v) was given on the command line (after flags are parsed)."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  return "verbosity" in flags.FLAGS and flags.FLAGS["verbosity"].present


def quiet_logging(verbose: bool) -> None:
  """Keeps the console to the run's own lines unless `verbose` (see the module docstring)."""
  root = logging.getLogger()
  root.setLevel(logging.INFO)
  if verbose:
    return
  for var in ("TF_CPP_MIN_LOG_LEVEL", "TPU_MIN_LOG_LEVEL", "TPU_STDERR_LOG_LEVEL"):  # XLA / libtpu C++ INFO logs
    os.environ.setdefault(var, "1")
  for handler in root.handlers:
    if not any(isinstance(f, _OwnLinesOrWarnings) for f in handler.filters):
      handler.addFilter(_OwnLinesOrWarnings())


def exit_code(e: BaseException) -> int | None:
  """The exit code `guard` gives `e`, or None for an exception that deserves its traceback."""
  code = getattr(e, "exit_code", None)
  if isinstance(e, UserError) or isinstance(code, int):
    return code
  if isinstance(e, OSError) and e.errno in USER_ERRNOS or type(e) is FileNotFoundError:
    return EXIT_USER_ERROR
  return None


def message(e: BaseException) -> str:
  if isinstance(e, OSError) and e.errno in USER_ERRNOS and e.filename:
    return f"cannot write {e.filename}: {e.strerror}"
  return str(e)


def guard(main):
  """`main(argv)` with user errors turned into one stderr message and an exit code (see the module docstring)."""
  @functools.wraps(main)
  def guarded(argv):
    try:
      return main(argv)
    except KeyboardInterrupt:
      if os.environ.get("COMPCLIP_TRACEBACK"):
        raise
      print("interrupted (Ctrl-C)", file=sys.stderr, flush=True)
      sys.exit(EXIT_SIGINT)
    except Exception as e:  # pylint: disable=broad-except
      code = exit_code(e)
      if code is None or os.environ.get("COMPCLIP_TRACEBACK"):
        raise
      print(f"error: {message(e)}" if code == EXIT_USER_ERROR else message(e), file=sys.stderr, flush=True)
      sys.exit(code)

  return guarded
