// ONNX frontend: ModelProto (Debian's libonnx protobuf classes) -> IR.
// Handles the default domain at opsets 1-17, initializers in raw_data and in
// typed fields, external data files next to the model, Constant nodes (turned
// into constants), initializers listed as graph inputs, value_info, and
// nested graphs. Unknown ops, domains and opsets are reported with the node's
// name and op.
#pragma once

#include <string>

#include "ir/graph.h"
#include "util/status.h"

namespace onnx {
class ModelProto;
class TensorProto;
}  // namespace onnx

namespace tessera {

constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;

// Reads and imports a model file. External data is resolved relative to the
// file's directory.
Expected<Graph> import_onnx_file(const std::string& path);
// Imports an in-memory serialized ModelProto; `base_dir` resolves external
// data ("" = none allowed).
Expected<Graph> import_onnx_bytes(const std::string& bytes, const std::string& base_dir,
                                  const std::string& what = "model");
Expected<Graph> import_onnx_model(const onnx::ModelProto& model, const std::string& base_dir);

// TensorProto <-> Tensor.
Expected<Tensor> tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir);
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* proto);

// Reads / writes a serialized TensorProto file (ONNX test-data layout).
Expected<Tensor> read_tensor_file(const std::string& path, std::string* name = nullptr);
Status write_tensor_file(const std::string& path, const Tensor& t, const std::string& name);
// The dims of a serialized TensorProto file, read without its data (skipped with a seek): what a compile needs to
// size an input a run will read whole.
Expected<Dims> read_tensor_dims(const std::string& path);

}  // namespace tessera
