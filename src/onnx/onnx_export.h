// IR -> ONNX ModelProto. Every value with known type gets a value_info entry
// (graph inputs/outputs with their shapes, intermediates in value_info), so
// an exported subgraph carries its shapes to whoever parses it. Constants are
// written as initializers in raw_data. Round-trips through import_onnx_*.
#pragma once

#include <string>

#include "ir/graph.h"
#include "util/status.h"

namespace onnx {
class ModelProto;
}

namespace tessera {

Status export_onnx_model(const Graph& g, onnx::ModelProto* model);
Expected<std::string> export_onnx_bytes(const Graph& g);
Status export_onnx_file(const Graph& g, const std::string& path);

}  // namespace tessera
