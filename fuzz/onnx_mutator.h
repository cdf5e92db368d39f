// A structure-aware mutator for ONNX models: random bytes rarely parse as a ModelProto, so most mutations edit a
// parsed model (an attribute, a dim, a dtype, an input name, an opset, a node's op) and serialize it again. The rest
// are libFuzzer's byte mutations, which find what the parser itself does with broken bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera_fuzz {

// LLVMFuzzerCustomMutator's contract: mutate data[0, size) in place within max_size bytes, return the new size.
size_t mutate_onnx_model(uint8_t* data, size_t size, size_t max_size, unsigned seed);

// Whether the serialized model holds a Loop or Scan anywhere (their trip counts are the model's to choose, so a
// harness may import such a model without running it).
bool onnx_model_has_loops(const uint8_t* data, size_t size);

}  // namespace tessera_fuzz
