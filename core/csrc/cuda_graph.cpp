// CUDA graph capture and replay for fleetrl's learner updates (core/src/optim/graph.rs).
// tch exposes no CUDA graph API, so this wraps libtorch's own: `at::cuda::CUDAGraph`, which
// routes the capture's allocations to a private memory pool and registers the default CUDA
// generator so random ops draw fresh numbers on every replay, and the current-stream calls
// that run a capture on a stream of its own. Every function reports a C++ exception as a
// malloc'd message in `*err` (freed with fleetrl_cuda_free_error) and returns null / nonzero.

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include "guarded.h"


namespace {

// The stream a capture runs on, and the one that was current before it was entered.
struct SideStream {
  c10::cuda::CUDAStream side;
  c10::cuda::CUDAStream saved;
};

using fleetrl::guarded;

}  // namespace

extern "C" {

void fleetrl_cuda_free_error(char* err) { free(err); }

void* fleetrl_cuda_side_stream_new(int device, char** err) {
  SideStream* stream = nullptr;
  guarded(err, [&] {
    auto side = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device));
    stream = new SideStream{side, c10::cuda::getCurrentCUDAStream(side.device_index())};
  });
  return stream;
}

void fleetrl_cuda_side_stream_free(void* stream) { delete static_cast<SideStream*>(stream); }

// Makes the side stream current on this thread, once the work queued so far has run. The
// device-wide waits here and in _exit happen a few times per run (warm-up and capture), so
// they cost nothing that matters, and they need no CUDA event API (whose headers pull in
// CUDA's device headers).
int fleetrl_cuda_side_stream_enter(void* handle, char** err) {
  return guarded(err, [&] {
    auto* s = static_cast<SideStream*>(handle);
    s->saved = c10::cuda::getCurrentCUDAStream(s->side.device_index());
    c10::cuda::device_synchronize();
    c10::cuda::setCurrentCUDAStream(s->side);
  });
}

// Makes the stream that was current again, once the side stream's work has run.
int fleetrl_cuda_side_stream_exit(void* handle, char** err) {
  return guarded(err, [&] {
    auto* s = static_cast<SideStream*>(handle);
    c10::cuda::device_synchronize();
    c10::cuda::setCurrentCUDAStream(s->saved);
  });
}

void* fleetrl_cuda_graph_new(char** err) {
  at::cuda::CUDAGraph* graph = nullptr;
  guarded(err, [&] { graph = new at::cuda::CUDAGraph(); });
  return graph;
}

void fleetrl_cuda_graph_free(void* graph) { delete static_cast<at::cuda::CUDAGraph*>(graph); }

// Starts capturing the current stream's work (which must not be the default stream). Only
// this thread's unsafe CUDA calls break the capture: the learner's other threads keep
// copying batches to the device meanwhile.
int fleetrl_cuda_graph_capture_begin(void* graph, char** err) {
  return guarded(err, [&] {
    static_cast<at::cuda::CUDAGraph*>(graph)->capture_begin({0, 0},
                                                           cudaStreamCaptureModeThreadLocal);
  });
}

int fleetrl_cuda_graph_capture_end(void* graph, char** err) {
  return guarded(err, [&] { static_cast<at::cuda::CUDAGraph*>(graph)->capture_end(); });
}

// Queues the captured work on the current stream.
int fleetrl_cuda_graph_replay(void* graph, char** err) {
  return guarded(err, [&] { static_cast<at::cuda::CUDAGraph*>(graph)->replay(); });
}

}  // extern "C"
