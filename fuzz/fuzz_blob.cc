// libFuzzer harness: a plugin's blob loader, through the ABI. The plugin (TESSERA_FUZZ_BACKEND, one harness binary
// per plugin) is loaded as `tessera` loads it. The harness knows a few small region models; the first byte of an
// input picks one, the rest is an engine blob. The blob is loaded with that model's constants and, when the plugin
// accepts it, run once on the model's input shapes. The seed corpus is what the plugin's own compile writes:
//   TESSERA_FUZZ_WRITE_SEEDS=DIR fuzz_blob_<plugin>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "ir/graph.h"
#include "onnx/onnx_export.h"
#include "passes/shape_inference.h"

namespace {

using namespace tessera;

struct Region {
  Graph graph;
  std::string model;  // the serialized region model a plugin compiles
  std::vector<std::pair<std::string, Tensor>> constants;
};

Tensor random_tensor(Dims dims, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor t(DType::kFloat32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

struct RegionBuilder {
  Graph g;
  RegionBuilder& input(const std::string& name, Dims dims) {
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{DType::kFloat32, Shape::FromDims(dims)};
    return *this;
  }
  RegionBuilder& weight(const std::string& name, Dims dims) {
    g.constants[name] = random_tensor(std::move(dims), static_cast<unsigned>(g.constants.size()));
    return *this;
  }
  RegionBuilder& constant(const std::string& name, Tensor t) {
    g.constants[name] = std::move(t);
    return *this;
  }
  RegionBuilder& node(const std::string& op, std::vector<std::string> in, const std::string& out,
                      std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.name = out + "_node";
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attrs = std::move(attrs);
    g.nodes.push_back(std::move(n));
    return *this;
  }
  Region done(const std::string& output) {
    g.opset = 13;
    g.outputs = {output};
    if (!infer_shapes(g).ok()) std::abort();
    Region r;
    auto bytes = export_onnx_bytes(g);
    if (!bytes.ok()) std::abort();
    r.model = *bytes;
    for (const auto& [name, t] : g.constants) r.constants.emplace_back(name, t);
    r.graph = std::move(g);
    return r;
  }
};

// What the engines of the three plugins claim between them: convolution, pooling, dense layers, normalisation and
// elementwise chains.
std::vector<Region> make_regions() {
  std::vector<Region> r;
  r.push_back(RegionBuilder()
                  .input("x", {1, 3, 8, 8})
                  .weight("w", {4, 3, 3, 3})
                  .weight("b", {4})
                  .node("Conv", {"x", "w", "b"}, "c", {{"pads", Attribute::Ints({1, 1, 1, 1})}})
                  .node("Relu", {"c"}, "y")
                  .done("y"));
  r.push_back(RegionBuilder()
                  .input("x", {2, 8})
                  .weight("w", {8, 4})
                  .weight("b", {4})
                  .node("MatMul", {"x", "w"}, "m")
                  .node("Add", {"m", "b"}, "y")
                  .done("y"));
  r.push_back(RegionBuilder()
                  .input("x", {1, 2, 8, 8})
                  .node("MaxPool", {"x"}, "p",
                        {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}})
                  .node("Sigmoid", {"p"}, "y")
                  .done("y"));
  r.push_back(RegionBuilder()
                  .input("x", {2, 5})
                  .weight("s", {5})
                  .node("Softmax", {"x"}, "p", {{"axis", Attribute::Int(-1)}})
                  .node("Mul", {"p", "s"}, "y")
                  .done("y"));
  r.push_back(RegionBuilder()
                  .input("x", {3, 6})
                  .weight("w", {6, 5})
                  .weight("b", {5})
                  .node("Gemm", {"x", "w", "b"}, "g")
                  .node("Tanh", {"g"}, "y")
                  .done("y"));
  r.push_back(RegionBuilder()
                  .input("x", {2, 3, 4})
                  .weight("a", {4})
                  .node("Add", {"x", "a"}, "s")
                  .node("Mul", {"s", "x"}, "y")
                  .done("y"));
  // int8 (oneDNN, XNNPACK): QuantizeLinear, QLinearConv with per-channel scales, and a DequantizeLinear folded into
  // the Add (oneDNN) or converted before it (XNNPACK).
  Tensor w(DType::kInt8, {4, 2, 3, 3}), ws(DType::kFloat32, {4}), wz(DType::kInt8, {4});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(i * 37 % 255 - 127);
  for (int64_t i = 0; i < 4; ++i) ws.data<float>()[i] = 0.01f * static_cast<float>(i + 1), wz.data<int8_t>()[i] = 0;
  auto scalar = [](DType dt, double v) {
    Tensor t(dt, Dims{});
    if (dt == DType::kFloat32) t.data<float>()[0] = static_cast<float>(v);
    else t.data<uint8_t>()[0] = static_cast<uint8_t>(v);
    return t;
  };
  r.push_back(RegionBuilder()
                  .input("x", {1, 2, 6, 6})
                  .input("r", {1, 4, 6, 6})
                  .constant("s", scalar(DType::kFloat32, 0.02))
                  .constant("z", scalar(DType::kUInt8, 128))
                  .constant("w", w)
                  .constant("ws", ws)
                  .constant("wz", wz)
                  .constant("ys", scalar(DType::kFloat32, 0.05))
                  .constant("yz", scalar(DType::kUInt8, 3))
                  .node("QuantizeLinear", {"x", "s", "z"}, "xq")
                  .node("QLinearConv", {"xq", "s", "z", "w", "ws", "wz", "ys", "yz"}, "cq",
                        {{"pads", Attribute::Ints({1, 1, 1, 1})}})
                  .node("DequantizeLinear", {"cq", "ys", "yz"}, "c")
                  .node("Add", {"c", "r"}, "y")
                  .done("y"));
  // Dynamic quantization (oneDNN): one DynamicQuantizeLinear feeding a ConvInteger of int8 weights and one of uint8
  // weights with a zero point, each cast and scaled as quantize_dynamic writes it, then a Sigmoid.
  Tensor wu(DType::kUInt8, {4, 2, 3, 3}), wuz(DType::kUInt8, Dims{}), wsc(DType::kFloat32, Dims{});
  for (int64_t i = 0; i < wu.numel(); ++i) wu.data<uint8_t>()[i] = static_cast<uint8_t>(i * 53 % 256);
  wuz.data<uint8_t>()[0] = 121;
  wsc.data<float>()[0] = 0.004f;
  RegionBuilder dq;
  dq.input("x", {1, 2, 6, 6}).constant("w", w).constant("wz", wz).constant("wu", wu).constant("wuz", wuz);
  dq.constant("ws", wsc).node("DynamicQuantizeLinear", {"x"}, "xq");
  dq.g.nodes.back().outputs = {"xq", "xs", "xz"};
  for (const char* k : {"a", "b"}) {
    const std::string p(k), weights = p == "a" ? "w" : "wu", zero = p == "a" ? "wz" : "wuz";
    dq.node("Mul", {"xs", "ws"}, p + "_s")
        .node("ConvInteger", {"xq", weights, "xz", zero}, p + "_acc", {{"pads", Attribute::Ints({1, 1, 1, 1})}})
        .node("Cast", {p + "_acc"}, p + "_f", {{"to", Attribute::Int(1)}})
        .node("Mul", {p + "_f", p + "_s"}, p + "_y");
  }
  r.push_back(dq.node("Add", {"a_y", "b_y"}, "sum").node("Sigmoid", {"sum"}, "y").done("y"));
  return r;
}

const std::vector<Region>& regions() {
  static const std::vector<Region> r = make_regions();
  return r;
}

std::shared_ptr<const Backend> backend() {
  static std::shared_ptr<const Backend> b = [] {
    auto found = find_backend(TESSERA_FUZZ_BACKEND);
    if (!found.ok()) {
      std::fprintf(stderr, "%s\n", found.status().message().c_str());
      std::abort();
    }
    return *found;
  }();
  return b;
}

// Each region the plugin compiles, as a seed: its index, then the blob.
void write_seeds(const std::string& dir) {
  for (size_t i = 0; i < regions().size(); ++i) {
    auto blob = backend()->compile(regions()[i].model, "");
    if (!blob.ok()) continue;
    std::ofstream f(dir + "/region" + std::to_string(i), std::ios::binary);
    f.put(static_cast<char>(i));
    f.write(reinterpret_cast<const char*>(blob->data), static_cast<std::streamsize>(blob->size));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("TESSERA_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  backend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Region& region = regions()[data[0] % regions().size()];
  auto engine = backend()->load(Blob::Copy(data + 1, size - 1), region.constants, 1, "region");
  if (!engine.ok()) return 0;
  std::vector<Tensor> inputs, outputs;
  for (const auto& name : region.graph.inputs) inputs.push_back(random_tensor(region.graph.info(name)->shape.concrete(), 1));
  for (const auto& name : region.graph.outputs) outputs.emplace_back(DType::kFloat32, region.graph.info(name)->shape.concrete());
  std::vector<const Tensor*> in;
  std::vector<Tensor*> out;
  for (auto& t : inputs) in.push_back(&t);
  for (auto& t : outputs) out.push_back(&t);
  (void)(*engine)->run(in, out);
  return 0;
}
