// Eager execution of nested graphs (If/Loop/Scan bodies). Names a body reads
// from enclosing graphs resolve through a chain of ValueScopes: the running
// frame of the enclosing plan, or of an enclosing body.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "backends/backend.h"
#include "ops/op_registry.h"
#include "util/thread_pool.h"

namespace tessera {

class ValueScope {
 public:
  virtual ~ValueScope() = default;
  // The value named `name` visible at this point, or null.
  virtual const Tensor* lookup(const std::string& name) const = 0;
  // The value named `name` when it is a constant of its graph (the same tensor
  // on every run), or null.
  virtual const Tensor* lookup_constant(const std::string& name) const { (void)name; return nullptr; }
};

class EagerSubgraphRunner final : public SubgraphRunner {
 public:
  EagerSubgraphRunner(const ValueScope* outer, int64_t opset, ThreadPool* pool,
                      const EngineTable* engines = nullptr)
      : outer_(outer), opset_(opset), pool_(pool), engines_(engines) {}
  Expected<std::vector<Tensor>> run(const Graph& g, const std::vector<Tensor>& inputs) override;

 private:
  const ValueScope* outer_;
  int64_t opset_;
  ThreadPool* pool_;
  const EngineTable* engines_;
};

}  // namespace tessera
