"""`python -m compclip_jax.demo`: the command is compclip_jax/cli/demo.py."""
from compclip_jax.cli.demo import run

if __name__ == "__main__":
  run()
