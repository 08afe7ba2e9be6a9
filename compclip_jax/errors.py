"""The one exception a user's mistake raises: library code raises `UserError` (or a subclass that names the kind of
mistake), and the command line (compclip_jax/cli/app.py, `guard`) prints its message as one line and exits with its
`exit_code` — no traceback, nothing matched by class name."""
from __future__ import annotations

EXIT_USER_ERROR = 2


class UserError(Exception):
  """A mistake the user can fix: the message says what is wrong, where (file, key, row) and what to do."""
  def __init__(self, message: str, exit_code: int = EXIT_USER_ERROR):
    super().__init__(message)
    self.exit_code = exit_code


class InputError(UserError, ValueError):
  """A file or folder the user gave cannot be read as what it should be (a checkpoint, a benchmark file, JSON): a
  `ValueError` too, so callers that catch `ValueError` around input reading keep working."""
  def __init__(self, message: str):
    super().__init__(message)
