#include "ops/kernels/fused_activation.h"

#include <limits>

namespace tessera::kernels {

Status parse_activation(const Node& node, const std::string& name, const std::vector<float>& params,
                        Epilogue* ep) {
  auto param = [&](size_t i, float def) { return i < params.size() ? params[i] : def; };
  if (name.empty()) {
    ep->act = Activation::kNone;
  } else if (name == "Relu") {
    ep->act = Activation::kRelu;
  } else if (name == "Clip") {
    ep->act = Activation::kClip;
    ep->lo = param(0, -std::numeric_limits<float>::max());
    ep->hi = param(1, std::numeric_limits<float>::max());
  } else if (name == "LeakyRelu") {
    ep->act = Activation::kLeakyRelu;
    ep->alpha = param(0, 0.01f);
  } else if (name == "HardSigmoid") {
    ep->act = Activation::kHardSigmoid;
    ep->alpha = param(0, 0.2f);
    ep->beta = param(1, 0.5f);
  } else if (name == "HardSwish") {  // also x * HardSigmoid(x) with that HardSigmoid's alpha and beta
    ep->act = Activation::kHardSwish;
    ep->alpha = param(0, 1.f / 6.f);
    ep->beta = param(1, 0.5f);
  } else if (name == "Sigmoid") {
    ep->act = Activation::kSigmoid;
  } else if (name == "Tanh") {
    ep->act = Activation::kTanh;
  } else if (name == "Swish") {  // x * Sigmoid(x): ONNX's Swish with alpha 1 (SiLU)
    ep->act = Activation::kSwish;
  } else {
    return Unsupported(node.describe() + ": fused activation '" + name + "' is not supported");
  }
  return Status::Ok();
}

Status activation_from_conv_attrs(const Node& node, Epilogue* ep) {
  return parse_activation(node, node.attr_string("activation", ""), node.attr_floats("activation_params"), ep);
}

Status activation_from_gemm_attrs(const Node& node, Epilogue* ep) {
  const std::string name = node.attr_string("activation", "");
  std::vector<float> params;
  if (name == "LeakyRelu") {
    params = {node.attr_float("activation_alpha", 0.01f)};
  } else if (name == "HardSigmoid") {
    params = {node.attr_float("activation_alpha", 0.2f), node.attr_float("activation_beta", 0.5f)};
  } else if (name == "HardSwish") {
    params = {node.attr_float("activation_alpha", 1.f / 6.f), node.attr_float("activation_beta", 0.5f)};
  } else if (name == "Clip") {
    // FusedGemm has no Clip parameters of its own; take them as alpha/beta.
    params = {node.attr_float("activation_alpha", -std::numeric_limits<float>::max()),
              node.attr_float("activation_beta", std::numeric_limits<float>::max())};
  }
  return parse_activation(node, name, params, ep);
}

}  // namespace tessera::kernels
