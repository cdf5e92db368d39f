// A compiled model: what `tessera compile` produces, what a .tsr artifact
// stores, and what the runtime loads.
//
//   graph      the glue graph: the nodes placed on the native backend, plus
//              one node of op type "Region" (domain "ai.tessera") per
//              external region; its attribute `engine` indexes `engines`.
//   constants  every top-level constant, each stored once, whether the glue
//              graph, one engine or several read it. graph.constants holds
//              the glue graph's own subset (sharing storage).
//   engines    one compiled blob per external region, with the value names it
//              exchanges with the glue graph and the constants it is loaded
//              with.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace tessera {

// Bytes that are either owned or borrowed from a mapping kept alive by `keep`.
struct Blob {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> keep;

  static Blob Copy(const void* data, size_t size);
  std::string_view view() const { return {reinterpret_cast<const char*>(data), size}; }
};

struct ConstantRef {
  std::string key;   // key in Program::constants
  std::string name;  // the initializer name inside the region model
};

struct EngineSpec {
  std::string region;           // "region_3" (report and error messages)
  std::string backend;          // backend name ("dnnl")
  std::string backend_version;  // tessera_backend_t::version() at compile time ("" if none)
  std::string options;          // options string given to compile
  std::vector<std::string> inputs;   // glue-graph value names, in the region model's input order
  std::vector<std::string> outputs;  // glue-graph value names, in the region model's output order
  std::vector<ConstantRef> constants;
  Blob blob;
};

struct BackendRecord {
  std::string name, version, options;
  std::string threading;  // the backend's declared threading ("openmp", "pool", "caller"; "" or "unknown")
};

struct ProgramMeta {
  std::string producer = "tessera";
  std::string producer_version;                  // TESSERA_VERSION
  std::string source_model;                      // file name the program was compiled from
  std::vector<BackendRecord> backends;           // the --backends list, with versions
  std::vector<std::string> shape_overrides;      // the --shape arguments, verbatim
};

struct Program {
  Graph graph;
  std::map<std::string, Tensor> constants;
  std::vector<EngineSpec> engines;
  ProgramMeta meta;
};

}  // namespace tessera
