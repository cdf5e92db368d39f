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

// `elide_above`: initializers of more bytes than this are written without
// their data (dims and dtype only, data_location EXTERNAL at location
// kElidedLocation): a model for an estimate, which needs shapes, not weights,
// and would otherwise copy every weight of a large region each time.
constexpr size_t kKeepAllData = static_cast<size_t>(-1);
constexpr const char* kElidedLocation = "tessera:elided";
Status export_onnx_model(const Graph& g, onnx::ModelProto* model, size_t elide_above = kKeepAllData);
Expected<std::string> export_onnx_bytes(const Graph& g, size_t elide_above = kKeepAllData);

// Serialized ModelProto `model` with the metadata_props entry key=value added (appended: concatenated protobuf
// messages merge, so the model is not parsed again).
std::string with_model_metadata(std::string model, const std::string& key, const std::string& value);
Status export_onnx_file(const Graph& g, const std::string& path);

}  // namespace tessera
