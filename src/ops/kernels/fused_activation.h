// Reads the activation fused into a convolution or GEMM node. Tessera uses
// the attribute names of ONNX Runtime's contrib ops so fused graphs stay
// loadable elsewhere:
//   com.microsoft FusedConv: activation (string), activation_params (floats)
//   com.microsoft FusedGemm: activation, activation_alpha, activation_beta
// Supported activations: Relu, Clip(min, max), LeakyRelu(alpha),
// HardSigmoid(alpha, beta), Sigmoid, Tanh, Tessera's HardSwish(alpha,
// beta) = x * HardSigmoid(x) (ONNX's HardSwish has 1/6 and 0.5) and
// Swish = x * Sigmoid(x) (ONNX's Swish with alpha 1, SiLU).
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/kernels/gemm.h"
#include "util/status.h"

namespace tessera::kernels {

// `params` are the activation's parameters in ONNX order (Clip: min, max;
// LeakyRelu: alpha; HardSigmoid: alpha, beta); missing ones take the ONNX
// defaults. An empty name means no activation.
Status parse_activation(const Node& node, const std::string& name, const std::vector<float>& params,
                        Epilogue* ep);

// FusedConv-style attributes (activation, activation_params).
Status activation_from_conv_attrs(const Node& node, Epilogue* ep);
// FusedGemm-style attributes (activation, activation_alpha, activation_beta).
Status activation_from_gemm_attrs(const Node& node, Epilogue* ep);

}  // namespace tessera::kernels
