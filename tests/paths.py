"""Where things are, for tests in any folder under tests/."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
PKG = os.path.join(ROOT, "compclip_jax")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
