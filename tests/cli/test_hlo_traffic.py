"""tools/hlo_traffic.py on a hand-written HLO module: each top-level instruction's operands and result are counted
in bytes (fusions as one instruction; what a fused computation does inside stays on chip), by the op_name of its
metadata with layer numbers folded; parameters, tuples and bitcasts move nothing."""
import importlib.util
import os

from tests import paths

_SPEC = importlib.util.spec_from_file_location("hlo_traffic", os.path.join(paths.ROOT, "tools", "hlo_traffic.py"))
hlo_traffic = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(hlo_traffic)

HLO = """HloModule jit_step

%fused_computation (p0: bf16[4,8], p1: bf16[8,16]) -> bf16[4,16] {
  %p0 = bf16[4,8]{1,0} parameter(0)
  %p1 = bf16[8,16]{1,0} parameter(1)
  ROOT %dot.1 = bf16[4,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (param.0: bf16[4,8], param.1: bf16[8,16]) -> f32[4,16] {
  %param.0 = bf16[4,8]{1,0} parameter(0)
  %param.1 = bf16[8,16]{1,0} parameter(1)
  %fusion.1 = bf16[4,16]{1,0} fusion(%param.0, %param.1), kind=kOutput, calls=%fused_computation, metadata={op_name="jit(step)/jvp(text_model)/layers/3/mlp/dot_general"}
  %fusion.2 = bf16[4,16]{1,0} fusion(%param.0, %param.1), kind=kOutput, calls=%fused_computation, metadata={op_name="jit(step)/jvp(text_model)/layers/11/mlp/dot_general"}
  %bitcast.1 = bf16[64]{0} bitcast(%fusion.1)
  ROOT %convert.1 = f32[4,16]{1,0} convert(%fusion.2), metadata={op_name="jit(step)/convert_element_type"}
}
"""  # noqa: E501  (HLO lines as XLA writes them)


def test_bytes_of_top_level_instructions_by_what_they_compute():
  t = hlo_traffic.traffic(HLO)
  dot = 2 * 2 * (4 * 8 + 8 * 16 + 4 * 16)  # two fusions: both operands read, the result written; 2 bytes each
  after = "convert: after the gradient/convert_element_type"  # neither under jvp nor transpose: after the gradient
  assert t == {"fusion: text_model/layers/*/mlp/dot_general": dot, after: 2 * 64 + 4 * 64}
  assert hlo_traffic.group("fusion: text_model/layers/*/mlp/dot_general") == "forward matmuls"
  assert hlo_traffic.group(after) == "optimiser and the rest"


def test_the_optimisers_update_is_not_the_forward_pass():
  """XLA fuses AdamW's update with the norms that read the same tensors, and names the fusion after a norm's
  reduce_sum: outside jvp and transpose, it is the optimiser, wherever the step was traced (`jit(traced)`)."""
  hlo = ("ENTRY %main () -> f32[] {\n  %fusion.9 = (f32[]{:T(128)}, f32[512,512]{1,0}) fusion(%a, %b), kind=kLoop, "
         'calls=%c, metadata={op_name="jit(traced)/reduce_sum"}\n'
         '  %fusion.8 = f32[512,512]{1,0} fusion(%a), kind=kLoop, calls=%d, metadata={op_name="jit(traced)/jvp()/'
         'reduce_sum"}\n}\n')
  t = hlo_traffic.traffic(hlo)
  assert [hlo_traffic.group(k) for k in t] == ["optimiser and the rest", "forward, other"], t


def test_a_weight_brought_on_chip_and_the_kernels_are_grouped_by_what_they_are():
  """A custom call without an op_name is named by its target: libtpu's ConcatBitcast (a weight's slices joined on
  chip) counts as weights into on-chip memory, not as the optimiser; the Pallas attention kernel (a pallas_call in
  its op_name) as attention."""
  line = ('  %custom-call.3 = f32[8,128]{1,0} custom-call(%slice-done.1, %slice-done.2), '
          'custom_call_target="ConcatBitcast"')
  t = hlo_traffic.traffic("ENTRY %main () -> f32[8,128] {\n" + line + "\n}\n")
  assert t == {"custom-call: ConcatBitcast": 8 * 128 * 4}
  assert hlo_traffic.group("custom-call: ConcatBitcast") == "weights into on-chip memory"
  kernel = "custom-call: transpose(jvp())/checkpoint/cond/branch_0_fun/shard_map/backward_kernel/pallas_call"
  assert hlo_traffic.group(kernel) == hlo_traffic.GROUPS[0]
