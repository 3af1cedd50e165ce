// libtorch's c10d collectives for fleetrl's learners across processes (core/src/collective).
// tch exposes no torch.distributed, so this wraps what `torch.distributed` itself runs on: a
// `TCPStore` for the rendezvous (rank 0 serves it), `ProcessGroupGloo` (in libtorch_cpu) and,
// where libtorch has CUDA and NCCL's header is at hand, `ProcessGroupNCCL` (in
// libtorch_cuda). Tensors come in as tch's handles, which are `at::Tensor*`. Every function
// reports a C++ exception as a malloc'd message in `*err` (freed with fleetrl_c10d_free) and
// returns null / nonzero: nothing here aborts the process.

#define USE_C10D_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef FLEETRL_C10D_NCCL
#define USE_C10D_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <cstring>
#include <exception>

namespace {

struct Store {
  c10::intrusive_ptr<c10d::Store> store;
};

struct Group {
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
};

// Runs `f`, turning a C++ exception into a malloc'd message in `*err` and 1 (else 0).
// libtorch's own errors lose their C++ backtrace: the message is for a log line.
template <class F>
int guarded(char** err, F f) {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    *err = strdup(e.what_without_backtrace());
  } catch (const std::exception& e) {
    *err = strdup(e.what());
  } catch (...) {
    *err = strdup("unknown C++ exception");
  }
  return 1;
}

// Waits for `work`, bounded by the group's timeout; a timeout is an error like any other.
void finish(const Group& group, c10::intrusive_ptr<c10d::Work> work) {
  if (!work->wait(group.timeout)) {
    throw std::runtime_error("the collective did not complete");
  }
}

}  // namespace

extern "C" {

void fleetrl_c10d_free(void* p) { free(p); }

// Rank 0 (`is_server`) listens on `port` and waits for `world_size` ranks to connect; the
// others connect to `host:port`, retrying. Either gives up after `timeout_ms`.
void* fleetrl_c10d_store_new(const char* host, uint16_t port, int is_server, int world_size,
                             int64_t timeout_ms, char** err) {
  Store* out = nullptr;
  guarded(err, [&] {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = is_server != 0;
    opts.numWorkers = static_cast<size_t>(world_size);
    opts.waitWorkers = true;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto store = c10::make_intrusive<c10d::TCPStore>(host, opts);
    out = new Store{store};
  });
  return out;
}

void fleetrl_c10d_store_free(void* store) { delete static_cast<Store*>(store); }

int fleetrl_c10d_store_set(void* store, const char* key, const uint8_t* data, size_t len,
                           char** err) {
  return guarded(err, [&] {
    std::vector<uint8_t> value(data, data + len);
    static_cast<Store*>(store)->store->set(key, value);
  });
}

// Waits (up to the store's timeout) for `key` and copies its value into a malloc'd buffer.
int fleetrl_c10d_store_get(void* store, const char* key, uint8_t** data, size_t* len,
                           char** err) {
  return guarded(err, [&] {
    auto value = static_cast<Store*>(store)->store->get(key);
    *len = value.size();
    *data = static_cast<uint8_t*>(malloc(value.size() + 1));
    memcpy(*data, value.data(), value.size());
  });
}

// A gloo group over `store`. Its device is the interface named by GLOO_SOCKET_IFNAME, as
// torch.distributed reads it, or else the one this host's name resolves to.
void* fleetrl_c10d_gloo_new(void* store, int rank, int size, int64_t timeout_ms, char** err) {
  Group* out = nullptr;
  guarded(err, [&] {
    auto timeout = std::chrono::milliseconds(timeout_ms);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && ifname[0] != '\0') {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname, false));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice(false));
    }
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(
        static_cast<Store*>(store)->store, rank, size, opts);
    out = new Group{backend, timeout};
  });
  return out;
}

#ifdef FLEETRL_C10D_NCCL
// An NCCL group over `store` (one CUDA device per rank: the tensors' own).
void* fleetrl_c10d_nccl_new(void* store, int rank, int size, int64_t timeout_ms, char** err) {
  Group* out = nullptr;
  guarded(err, [&] {
    auto timeout = std::chrono::milliseconds(timeout_ms);
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        static_cast<Store*>(store)->store, rank, size, opts);
    out = new Group{backend, timeout};
  });
  return out;
}
#endif

void fleetrl_c10d_group_free(void* group) { delete static_cast<Group*>(group); }

// Sums `tensor` (dense, contiguous) over the group, in place, and waits for it.
int fleetrl_c10d_all_reduce_sum(void* group, void* tensor, char** err) {
  return guarded(err, [&] {
    auto* g = static_cast<Group*>(group);
    std::vector<at::Tensor> tensors{*static_cast<at::Tensor*>(tensor)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = g->timeout;
    finish(*g, g->backend->allreduce(tensors, opts));
  });
}

// Overwrites `tensor` on every rank with `root`'s, and waits for it.
int fleetrl_c10d_broadcast(void* group, void* tensor, int root, char** err) {
  return guarded(err, [&] {
    auto* g = static_cast<Group*>(group);
    std::vector<at::Tensor> tensors{*static_cast<at::Tensor*>(tensor)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = g->timeout;
    finish(*g, g->backend->broadcast(tensors, opts));
  });
}

// gloo's monitored barrier: rank 0 waits up to `timeout_ms` for every other rank to answer and
// its error names each one that did not; another rank's error says rank 0 did not answer.
int fleetrl_c10d_monitored_barrier(void* group, int64_t timeout_ms, char** err) {
  return guarded(err, [&] {
    c10d::BarrierOptions opts;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    static_cast<Group*>(group)->backend->monitoredBarrier(opts, true);
  });
}

}  // extern "C"
