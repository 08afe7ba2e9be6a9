"""One synthetic world per (size, seed, binding noise) for the whole test session, shared by the test processes
(pytest-xdist's workers) and the training subprocesses they start.

A `:runlocal` run writes its world into `<workdir>/world` by default: the scenes, then every sentence tagged by
spaCy (loading spaCy and tagging take most of it). Dozens of runs in the suite train on the same world, so the tests
point `data.path` at one written here instead; the run checks it is the world of its size and
seed (data/synthetic/world.py) and writes nothing. Runs whose test is about the world in the workdir keep the
default."""
import fcntl
import os
import pathlib

SHARED = "COMPCLIP_TEST_SHARED"  # the session's shared folder, set by tests/conftest.py before any test runs


def shared_world(size: int, seed: int, binding_noise: float = 0.0) -> str:
  """The folder of the world of (`size`, `seed`, `binding_noise`), written by the first process to ask (the others
  wait on its lock, then find it complete)."""
  from compclip_jax.data.synthetic import world  # pylint: disable=import-outside-toplevel
  root = pathlib.Path(os.environ[SHARED]) / f"world_{size}_{seed}_{binding_noise}"
  with open(f"{root}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    world.write_synthetic(str(root), size, seed, binding_noise=binding_noise)
  return str(root)


def use_shared_world(c):
  """Points config `c`'s synthetic training data (when it reads the default `<workdir>/world`) at the shared world of
  its size and seed; other sources are left as they are. Returns `c`."""
  if c.data.source == "synthetic" and not c.data.path:
    c.data.path = shared_world(c.data.synthetic_size, c.seed, c.data.synthetic_binding_noise)
  return c


def session_root(basetemp: pathlib.Path) -> pathlib.Path:
  """The folder every process of this pytest session sees: the session's base temporary folder (under xdist, the
  parent of each worker's own)."""
  root = (basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp) / "shared"
  root.mkdir(exist_ok=True)
  return root
