"""Where things are, for tests in any folder under tests/."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
PKG = os.path.join(ROOT, "compclip_jax")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def xla_flags(devices: int) -> str:
  """The suite's XLA_FLAGS (tests/conftest.py: its fast-compile flags) with `devices` CPU devices instead of 8, for a
  subprocess that needs another device count."""
  return os.environ["XLA_FLAGS"].replace("--xla_force_host_platform_device_count=8",
                                         f"--xla_force_host_platform_device_count={devices}")
