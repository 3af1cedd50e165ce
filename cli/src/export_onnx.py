"""fleetrl export --format onnx: converts the TorchScript policy fleetrl traced to ONNX.

Arguments: TRACED OUT OBS_DIM STATE KIND, where STATE is the recurrent state's width (0 for a
feed-forward policy) and KIND is "action" or "distribution". Inputs and outputs keep the
TorchScript module's order, named obs (h, c) and action, or log_probs, or mean and log_std
(then h, c); the batch dimension is dynamic.
"""

import sys

import torch

traced, out, obs_dim, state, kind = sys.argv[1:6]
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
policy_outputs = count - (2 if state > 0 else 0)
if kind == "action":
    output_names = ["action"]
elif policy_outputs == 1:
    output_names = ["log_probs"]
else:
    output_names = ["mean", "log_std"]
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
