"""fleetrl export --format onnx: converts the TorchScript policy fleetrl traced to ONNX.

Arguments: TRACED OUT OBS_DIM STATE NAMES, where STATE is the recurrent state's width (0 for a
feed-forward policy) and NAMES the policy's outputs, comma-separated ("action", "log_probs",
"q" or "mean,log_std"). Inputs and outputs keep the TorchScript module's order, named obs
(h, c) and NAMES (then h_next, c_next); the batch dimension is dynamic.
"""

import sys

import torch

traced, out, obs_dim, state, names = sys.argv[1:6]
obs_dim, state = int(obs_dim), int(state)
module = torch.jit.load(traced)
inputs = [torch.zeros(2, obs_dim)]
input_names = ["obs"]
if state > 0:
    inputs += [torch.zeros(2, state), torch.zeros(2, state)]
    input_names += ["h", "c"]
with torch.no_grad():
    result = module(*inputs)
count = len(result) if isinstance(result, (tuple, list)) else 1
output_names = names.split(",")
if state > 0:
    output_names += ["h_next", "c_next"]
assert len(output_names) == count, (output_names, count)
dynamic = {name: {0: "batch"} for name in input_names + output_names}
torch.onnx.export(
    module,
    tuple(inputs),
    out,
    dynamo=False,
    input_names=input_names,
    output_names=output_names,
    dynamic_axes=dynamic,
    opset_version=17,
)
