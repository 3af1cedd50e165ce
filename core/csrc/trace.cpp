// Tracing an actor-critic into a standalone TorchScript file (core/src/models/export.rs).
// tch's own tracer entry points register each output of the trace separately, and a method
// with several outputs cannot be saved ("exportable methods must have a single return value"),
// so this does what they do and packs several outputs into one tuple, as torch.jit.trace does,
// then saves the module. Every function reports a C++ exception as a malloc'd message in
// `*err` (freed with fleetrl_trace_free_error) and returns null / nonzero (guarded.h).

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/passes/fixup_trace_scope_blocks.h>
#include <torch/csrc/jit/passes/normalize_ops.h>
#include <torch/script.h>

#include "guarded.h"

#include <memory>
#include <vector>

using fleetrl::guarded;

extern "C" {

void fleetrl_trace_free_error(char* err) { free(err); }

// Starts tracing on this thread with `n` tensor inputs; returns the module the trace becomes
// a method of. Every tensor op on this thread is recorded until fleetrl_trace_end.
void* fleetrl_trace_begin(const char* name, const at::Tensor* const* inputs, int n, char** err) {
  torch::jit::Module* module = nullptr;
  int failed = guarded(err, [&] {
    if (torch::jit::tracer::isTracing()) {
      throw std::invalid_argument("a trace is already running on this thread");
    }
    auto owned = std::make_unique<torch::jit::Module>(name);
    auto state = std::make_shared<torch::jit::tracer::TracingState>();
    torch::jit::tracer::setTracingState(state);
    state->graph->insertInput(0, "self")->setType(owned->_ivalue()->type());
    for (int i = 0; i < n; ++i) {
      auto value = state->graph->addInput();
      value->setType(c10::TensorType::get());
      state->setValue(*inputs[i], value);
    }
    module = owned.release();
  });
  if (failed) {
    torch::jit::tracer::abandon();
  }
  return module;
}

// Ends the trace: `outputs` (one tensor, or a tuple of several) become the return value of
// the module's `forward`; the module is saved to `path` and freed.
int fleetrl_trace_end(void* handle, const at::Tensor* const* outputs, int n, const char* path,
                      char** err) {
  std::unique_ptr<torch::jit::Module> module(static_cast<torch::jit::Module*>(handle));
  int failed = guarded(err, [&] {
    auto state = torch::jit::tracer::getTracingState();
    if (state == nullptr) {
      throw std::invalid_argument("no trace is running on this thread");
    }
    std::vector<torch::jit::Value*> values;
    for (int i = 0; i < n; ++i) {
      values.push_back(state->getOutput(*outputs[i], i));
    }
    auto& graph = state->graph;
    if (values.size() == 1) {
      graph->registerOutput(values[0]);
    } else {
      graph->registerOutput(graph->insertNode(graph->createTuple(values))->output());
    }
    torch::jit::FixupTraceScopeBlocks(graph, module.get());
    torch::jit::NormalizeOps(graph);
    torch::jit::tracer::setTracingState(nullptr);
    auto fn = module->_ivalue()->compilation_unit()->create_function("forward", graph);
    module->type()->addMethod(fn);
    module->save(path);
  });
  if (failed && torch::jit::tracer::isTracing()) {
    torch::jit::tracer::abandon();
  }
  return failed;
}

}  // extern "C"
