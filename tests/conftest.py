"""Test setup: a fake 8-device CPU mesh (set before jax is imported) and fixtures shared across test files."""
import os
import tempfile

# Fast compiles for the suite's programs: nearly all are tiny models whose compile time dominates their run time.
# LLVM at -O0 (three training/parity tests with a cold cache: 141.6 s → 130.5 s) and XLA:CPU's elemental emitters
# instead of its fusion emitters (a :runlocal CLIC step pair compiles in 4.3 s instead of 6.6 s, an eager op in
# 17 ms instead of 28 ms; a :runlocal CLIC run takes 14.3 s instead of 17.7 s); no fast-math either way, so the
# numerics are XLA's own. Not for the manual tier (COMPCLIP_MANUAL_TESTS=1): its demo runs train for minutes, and
# -O0 code runs ~3× slower. A user's XLA_FLAGS (e.g. set to reproduce a speed) take precedence.
FAST_COMPILE = "" if os.environ.get("COMPCLIP_MANUAL_TESTS") == "1" else \
    " --xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8" + FAST_COMPILE)
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One persistent XLA compilation cache for the whole suite, the training subprocesses included (they inherit the
# environment): dozens of :runlocal runs compile the same tiny steps, and a cache hit turns a ~15 s CPU compile into a
# file read (measured: a :runlocal CLIC run 50.6 s → 33.7 s). Same HLO, same executable: results are unchanged.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "compclip_jax_test_xla_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

import pathlib  # noqa: E402

import pytest  # noqa: E402

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "benchmarks"

MANUAL = "COMPCLIP_MANUAL_TESTS"


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: training runs, tests over ~15 s (CI runs them; -m 'not slow' skips)")
  config.addinivalue_line("markers", f"manual: minutes-long checks CI does not run; {MANUAL}=1 runs them")


def pytest_collection_modifyitems(config, items):
  if os.environ.get(MANUAL) == "1":
    return
  skip = pytest.mark.skip(reason=f"manual tier: set {MANUAL}=1 to run (minutes on 2 cores)")
  for item in items:
    if "manual" in item.keywords:
      item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _session_shared_folder(tmp_path_factory):
  """The folder the test processes of this session share (tests/worlds.py)."""
  from tests import worlds  # pylint: disable=import-outside-toplevel
  os.environ[worlds.SHARED] = str(worlds.session_root(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="session")
def benchmarks_dir() -> pathlib.Path:
  """The real annotation files (../shared/benchmarks); tests that need them skip when the folder is absent."""
  if not BENCHMARKS.is_dir():
    pytest.skip(f"real benchmark annotation files not found at {BENCHMARKS}")
  return BENCHMARKS


@pytest.fixture
def absl_flags_parsed():
  """What an absl entry point (app.run, as in python -m compclip_jax.main) has done before a pipeline with grain
  worker processes starts: grain reads its flag --grain_enable_multiprocess_worker_profiling in the parent
  (ProcessPrefetchIterDataset.__iter__, whenever jax's profiler hooks load), which absl refuses before parsing.
  Library code leaves absl alone, so the test, as the entry point, does it — and undoes it."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  if flags.FLAGS.is_parsed():
    yield
    return
  flags.FLAGS.mark_as_parsed()
  yield
  flags.FLAGS.unparse_flags()


@pytest.fixture(scope="session")
def tagger():
  """spaCy's full pipeline, loaded once per test process (its per-sentence memo is deterministic)."""
  from compclip_jax.data.negatives import SpacyTagger  # pylint: disable=import-outside-toplevel
  return SpacyTagger()


@pytest.fixture(scope="session")
def t5tok(tmp_path_factory):
  """A small SentencePiece model (T5 special ids: pad 0, eos 1, unk 2) trained on the test data's captions."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  from compclip_jax.data.tokenizers import T5Tokenizer  # pylint: disable=import-outside-toplevel
  from tests import data_fixtures as df  # pylint: disable=import-outside-toplevel
  tmp = tmp_path_factory.mktemp("spm")
  corpus = [df.caption(np.random.default_rng(i)) for i in range(300)]
  spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(tmp / "spiece"), vocab_size=40,
                                 hard_vocab_limit=False, minloglevel=2, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
  return T5Tokenizer(str(tmp / "spiece.model"))


@pytest.fixture(scope="session")
def tok():
  from compclip_jax.data.tokenizers import CLIPTokenizer  # pylint: disable=import-outside-toplevel
  return CLIPTokenizer.default()
