"""Test setup: a fake 8-device CPU mesh (set before jax is imported) and fixtures shared across test files."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pathlib  # noqa: E402

import pytest  # noqa: E402

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "benchmarks"


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: slower tests (CI runs them too)")


@pytest.fixture(scope="session")
def benchmarks_dir() -> pathlib.Path:
  """The real annotation files (../shared/benchmarks); tests that need them skip when the folder is absent."""
  if not BENCHMARKS.is_dir():
    pytest.skip(f"real benchmark annotation files not found at {BENCHMARKS}")
  return BENCHMARKS
