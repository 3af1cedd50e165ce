// Declarations standing in for gloo's headers, which the PyPI torch wheel does not ship
// although its c10d headers include them. libtorch's `ProcessGroupGloo.hpp` needs only these
// names: it holds gloo objects behind pointers (so the class layout does not depend on gloo's
// definitions) and derives one inline adapter (`GlooStore`) from the store interface below; one inline
// function calls `Context::setTimeout`.
// core/csrc/c10d.cpp never constructs that adapter nor any gloo object: libtorch_cpu, which
// bundles gloo, does. Only what the header names is declared.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gloo {

// ProcessGroupGloo::setTimeout (inline) calls this; the definition is libtorch's gloo.
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};

namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport

namespace rendezvous {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) = 0;
};

}  // namespace rendezvous
}  // namespace gloo
