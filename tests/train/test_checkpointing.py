"""Asynchronous checkpoints (compclip_jax/train/checkpointing.py): what `save` was given is what a restore returns, even
when the next step donates and overwrites the saved buffers while the write is in flight; iterator states follow
orbax's `keep`."""
import jax
import jax.numpy as jnp
import numpy as np

from compclip_jax.train import checkpointing

# a train step's donation: the saved buffers are reused for the result
_overwrite = jax.jit(lambda s: jax.tree.map(lambda x: x * 0 - 7, s), donate_argnums=0)


def _abstract(state):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def test_an_async_save_is_unaffected_by_the_next_step_donating_its_buffers(tmp_path):
  state = {"w": jnp.arange(4_000_000, dtype=jnp.float32), "step": jnp.int32(1)}
  # copies: on CPU jax.device_get returns views of the buffers, and a viewed buffer is never donated (the test
  # would then not see a save that reads the state too late)
  saved = {k: np.array(v, copy=True) for k, v in state.items()}
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=3, asynchronous=True)
  ckpt.save(1, state, {"pipe": {"position": 8}})
  state = jax.block_until_ready(_overwrite(state))  # while orbax may still be writing step 1
  ckpt.close()  # commits it
  assert float(state["w"][3]) == -7.0
  step, restored, data_states = checkpointing.Checkpointer(str(tmp_path)).restore_latest(_abstract(state))
  assert step == 1 and data_states == {"pipe": {"position": 8}}
  for k in saved:
    np.testing.assert_array_equal(np.asarray(restored[k]), saved[k], err_msg=k)


def test_iterator_states_follow_the_kept_steps(tmp_path):
  state = {"w": jnp.zeros(8)}
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=2, asynchronous=True)
  for step in (1, 2, 3):
    ckpt.save(step, state, {"pipe": {"position": step}})
  ckpt.close()
  assert sorted(checkpointing.Checkpointer(str(tmp_path)).manager.all_steps()) == [2, 3]
  names = sorted(p.name for p in (tmp_path / "checkpoints" / "data").iterdir())
  assert names == ["step_2.process_0.json", "step_3.process_0.json"]
