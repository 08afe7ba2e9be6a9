"""`python -m compclip_jax.main`, kept for one release: the command is compclip_jax/cli/main.py."""
from compclip_jax.cli.main import run

if __name__ == "__main__":
  run()
