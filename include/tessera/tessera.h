// Tessera's C++ API: load an ONNX model into an InferenceSession and run it.
//
//   auto session = tessera::InferenceSession::Load("model.onnx");
//   if (!session.ok()) { ... session.status().message() ... }
//   auto outputs = (*session)->run(std::vector<tessera::Tensor>{input});
//
// Every fallible call returns tessera::Expected<T> or tessera::Status; nothing
// throws for bad models or inputs. run() may be called from several threads
// at once on one session.
#pragma once

#include "ir/tensor.h"
#include "onnx/onnx_import.h"
#include "runtime/session.h"
