#include "onnx/onnx_import.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <algorithm>
#include <functional>
#include <map>
#include <limits>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include "onnx/contrib_lowering.h"
#include "ops/op_registry.h"

namespace tessera {

namespace {

// The newest opset Debian's onnx (1.12) has schemas for.
constexpr int64_t kSchemaOpset = 17;

// ONNX's schema of a default-domain op at `opset` (at kSchemaOpset past it); null when there is none.
const onnx::OpSchema* schema_at(const std::string& op, int64_t opset) {
  return onnx::OpSchemaRegistry::Schema(op, static_cast<int>(std::min(opset, kSchemaOpset)), "");
}

// The formal parameter input i binds to: its own, or a trailing variadic one; null past the schema's inputs (an input
// a later opset added).
const onnx::OpSchema::FormalParameter* formal_of(const onnx::OpSchema& schema, int i) {
  const auto& formals = schema.inputs();
  if (static_cast<size_t>(i) < formals.size()) return &formals[static_cast<size_t>(i)];
  if (!formals.empty() && formals.back().GetOption() == onnx::OpSchema::Variadic) return &formals.back();
  return nullptr;
}

// For ops ONNX's schemas (as Debian has them) do not know: the first `lo` inputs given, at most `hi` inputs, and one
// output.
Status check_fixed_arity(const Node& n, int lo, int hi) {
  const int ins = static_cast<int>(n.inputs.size());
  bool ok = ins >= lo && ins <= hi && n.outputs.size() >= 1 && !n.outputs[0].empty();
  for (int i = 0; ok && i < lo; ++i) ok = !n.inputs[static_cast<size_t>(i)].empty();
  if (ok) return Status::Ok();
  return InvalidModel(n.describe() + ": has " + std::to_string(ins) + " inputs and " +
                      std::to_string(n.outputs.size()) + " outputs; it takes " + std::to_string(lo) +
                      (hi == lo ? "" : " to " + std::to_string(hi)) + " inputs and an output");
}

// The input and output counts ONNX's schema allows the node at `opset` (Debian's onnx knows schemas up to opset 17:
// past it, the opset-17 schema's counts, with the inputs later opsets added). Kernels, engines and shape
// inference index inputs and outputs by position, so a node with fewer than its op's required ones is refused here.
Status check_arity(const Node& n, int64_t opset) {
  if (n.domain == "com.microsoft") {  // the contrib ops that run as they are (the others are lowered on import)
    static const std::map<std::string, std::pair<int, int>> kContrib = {
        {"Gelu", {1, 1}}, {"FusedConv", {2, 4}}, {"FusedGemm", {2, 3}}};
    auto it = kContrib.find(n.op_type);
    return it == kContrib.end() ? Status::Ok() : check_fixed_arity(n, it->second.first, it->second.second);
  }
  if (n.domain == "ai.tessera") {  // Tessera's own ops whose kernels take fixed inputs (the others check their own)
    static const std::map<std::string, std::pair<int, int>> kOwn = {{"FusedMatMul", {2, 3}},
                                                                    {"FusedConvMaxPool", {2, 3}}};
    auto it = kOwn.find(n.op_type);
    return it == kOwn.end() ? Status::Ok() : check_fixed_arity(n, it->second.first, it->second.second);
  }
  if (!n.domain.empty()) return Status::Ok();
  const onnx::OpSchema* schema = schema_at(n.op_type, opset);
  // ONNX Runtime runs LayerNormalization in the default domain at every opset (it registers its own kernel from
  // version 1, and its fusions write the op into models of any opset, which it saves as they are).
  if (!schema && n.op_type == "LayerNormalization") {
    if (n.outputs.size() > 3) return InvalidModel(n.describe() + ": has more than 3 outputs");
    return check_fixed_arity(n, 2, 3);
  }
  if (!schema) {
    for (int v = static_cast<int>(opset) + 1; v <= kSchemaOpset; ++v) {
      if (const onnx::OpSchema* later = onnx::OpSchemaRegistry::Schema(n.op_type, v, "")) {
        return InvalidModel(n.describe() + ": the operator does not exist at opset " + std::to_string(opset) +
                            " (it was introduced at opset " + std::to_string(later->since_version()) + ")");
      }
    }
    // The ops of opsets 18-21 that Tessera runs, which have no schema there: each takes exactly these inputs.
    static const std::map<std::string, int> kNewer = {
        {"AffineGrid", 2}, {"BitwiseAnd", 2}, {"BitwiseNot", 1}, {"BitwiseOr", 2},        {"BitwiseXor", 2},
        {"CenterCropPad", 2}, {"Col2Im", 3}, {"Gelu", 1},       {"GroupNormalization", 3}, {"Mish", 1}};
    auto it = kNewer.find(n.op_type);
    return it == kNewer.end() ? Status::Ok() : check_fixed_arity(n, it->second, it->second);
  }
  const int ins = static_cast<int>(n.inputs.size()), outs = static_cast<int>(n.outputs.size());
  for (int i = 0; i < ins; ++i) {
    const onnx::OpSchema::FormalParameter* f = formal_of(*schema, i);
    if (!f) break;
    const auto& formal = *f;
    if (n.inputs[static_cast<size_t>(i)].empty() && formal.GetOption() == onnx::OpSchema::Single) {
      return InvalidModel(n.describe() + ": input " + std::to_string(i) + " ('" + formal.GetName() +
                          "') is required but not given");
    }
  }
  // "has 0 inputs; opset 13 allows 2 to 3" when `have` is outside [lo, hi].
  auto count = [&](const char* what, int have, int lo, int hi) -> Status {
    if (have >= lo && have <= hi) return Status::Ok();
    return InvalidModel(n.describe() + ": has " + std::to_string(have) + " " + what + "; opset " +
                        std::to_string(opset) + " allows " + std::to_string(lo) +
                        (hi == lo ? "" : hi > 1000 ? " or more" : " to " + std::to_string(hi)));
  };
  // Past kSchemaOpset, the ops whose later versions take more inputs than their opset-17 schema (no op gained outputs
  // in opsets 18-21).
  static const std::map<std::string, int> kMoreInputsLater = {
      {"ReduceL1", 2},      {"ReduceL2", 2},  {"ReduceLogSum", 2}, {"ReduceLogSumExp", 2}, {"ReduceMax", 2},
      {"ReduceMean", 2},    {"ReduceMin", 2}, {"ReduceProd", 2},   {"ReduceSumSquare", 2}, {"Pad", 4},
      {"DFT", 3}};
  int max_in = schema->max_input();
  if (opset > kSchemaOpset) {
    if (auto it = kMoreInputsLater.find(n.op_type); it != kMoreInputsLater.end()) max_in = std::max(max_in, it->second);
  }
  TSR_RETURN_IF_ERROR(count("inputs", ins, schema->min_input(), max_in));
  TSR_RETURN_IF_ERROR(count("outputs", outs, schema->min_output(), schema->max_output()));
  return Status::Ok();
}

// Whether ONNX's formal parameter `f` allows a tensor of `dt`. Past kSchemaOpset later opsets may allow more types
// for a type parameter, so there only a fixed type ("tensor(int64)" for Pad's pads) is held to.
Status check_allowed_type(const Node& n, int64_t opset, int i, const onnx::OpSchema::FormalParameter& f, DType dt) {
  const bool fixed = f.GetTypeStr().find('(') != std::string::npos;
  if (opset > kSchemaOpset && !fixed) return Status::Ok();
  const auto& allowed = f.GetTypes();
  const std::string mine =
      "tensor(" + onnx::Utils::DataTypeUtils::ToDataTypeString(static_cast<int32_t>(dt)) + ")";
  if (allowed.count(onnx::Utils::DataTypeUtils::ToType(mine))) return Status::Ok();
  std::vector<std::string> names;
  for (const onnx::DataType t : allowed) names.push_back(*t);
  std::sort(names.begin(), names.end());
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return InvalidModel(n.describe() + ": input " + std::to_string(i) + " ('" + n.inputs[static_cast<size_t>(i)] +
                      "') is " + dtype_name(dt) + "; at opset " + std::to_string(opset) + " the op's input '" +
                      f.GetName() + "' takes " + (fixed ? list : f.GetTypeStr() + " in {" + list + "}"));
}

// The input-type check the frontend installs (set_input_type_check): each input's dtype must be one ONNX's schema
// allows there (check_allowed_type), and inputs that it binds to one type parameter ("T" of Gemm's A, B and C) must
// have one dtype. A heterogeneous variadic parameter (Loop's carried values) binds each input on its own.
Status check_input_types(const InferContext& ctx) {
  const Node& n = ctx.node();
  if (!n.domain.empty()) return Status::Ok();
  const onnx::OpSchema* schema = schema_at(n.op_type, ctx.opset());
  if (!schema) return Status::Ok();
  std::map<std::string, int> bound;  // type parameter -> the first input bound to it
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const DType dt = ctx.in_dtype(i);
    if (!n.has_input(i) || dt == DType::kUndefined) continue;
    const onnx::OpSchema::FormalParameter* f = formal_of(*schema, i);
    if (!f) break;
    const auto& formal = *f;
    TSR_RETURN_IF_ERROR(check_allowed_type(n, ctx.opset(), i, formal, dt));
    if (formal.GetOption() == onnx::OpSchema::Variadic && !formal.GetIsHomogeneous()) continue;
    const std::string& param = formal.GetTypeStr();
    if (param.find('(') != std::string::npos) continue;  // a fixed type ("tensor(int64)"), no parameter
    auto [it, fresh] = bound.emplace(param, i);
    const DType first = ctx.in_dtype(it->second);
    if (!fresh && first != dt) {
      return InvalidModel(n.describe() + ": input " + std::to_string(i) + " ('" + n.inputs[static_cast<size_t>(i)] +
                          "') is " + dtype_name(dt) + " but input " + std::to_string(it->second) + " ('" +
                          n.inputs[static_cast<size_t>(it->second)] + "') is " + dtype_name(first) +
                          "; the op takes one type " + param + " for both");
    }
  }
  return Status::Ok();
}


Expected<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return IoError("cannot read '" + path + "'");
  return ss.str();
}

std::string dir_of(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? "." : path.substr(0, pos);
}

bool parse_proto(const std::string& bytes, google::protobuf::MessageLite* msg) {
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
  return msg->ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
}

template <class Dst, class Src>
void copy_typed(const Src& src, Tensor* t) {
  Dst* d = t->data<Dst>();
  for (int64_t i = 0; i < t->numel(); ++i) d[i] = static_cast<Dst>(src.Get(static_cast<int>(i)));
}

Status load_external(const onnx::TensorProto& p, const std::string& base_dir, std::string* out) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = std::atoll(kv.value().c_str());
    else if (kv.key() == "length") length = std::atoll(kv.value().c_str());
  }
  if (location.empty()) return InvalidModel("tensor '" + p.name() + "': external data without a location");
  if (base_dir.empty()) return InvalidModel("tensor '" + p.name() + "': external data is not allowed here");
  if (location.find("..") != std::string::npos || location[0] == '/') {
    return InvalidModel("tensor '" + p.name() + "': external data location '" + location + "' leaves the model directory");
  }
  std::string path = base_dir + "/" + location;
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("tensor '" + p.name() + "': cannot open external data file '" + path + "'");
  f.seekg(0, std::ios::end);
  int64_t size = f.tellg();
  if (offset < 0 || offset > size) return InvalidModel("tensor '" + p.name() + "': external data offset past the end of '" + path + "'");
  if (length < 0) length = size - offset;
  if (offset + length > size) return InvalidModel("tensor '" + p.name() + "': external data length past the end of '" + path + "'");
  out->resize(static_cast<size_t>(length));
  f.seekg(offset);
  f.read(out->data(), length);
  if (!f) return IoError("tensor '" + p.name() + "': cannot read external data '" + path + "'");
  return Status::Ok();
}

Expected<ValueInfo> value_info_from_proto(const onnx::ValueInfoProto& vi) {
  ValueInfo info;
  if (!vi.has_type()) return info;
  const auto& type = vi.type();
  // An empty TypeProto (PyTorch writes them into If branches) says nothing: the value's type is inferred.
  if (type.value_case() == onnx::TypeProto::VALUE_NOT_SET) return info;
  if (!type.has_tensor_type()) {
    return Unsupported("value '" + vi.name() + "': only tensor types are supported (sequence, map and optional are not)");
  }
  const auto& tt = type.tensor_type();
  info.dtype = dtype_from_onnx(tt.elem_type());
  if (tt.elem_type() != 0 && !dtype_is_supported(info.dtype)) {
    return Unsupported("value '" + vi.name() + "': element type " + std::to_string(tt.elem_type()) +
                       (tt.elem_type() == 8 ? " (string)" : "") + " is not supported");
  }
  if (tt.has_shape()) {
    std::vector<Dim> dims;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        if (d.dim_value() < 0) return InvalidModel("value '" + vi.name() + "': negative dimension");
        dims.emplace_back(d.dim_value());
      } else if (d.has_dim_param()) {
        dims.push_back(Dim::Symbol(d.dim_param()));
      } else {
        dims.emplace_back();
      }
    }
    info.shape = Shape(std::move(dims));
    if (info.shape.fully_known() && info.dtype != DType::kUndefined) {
      const std::string problem = tensor_size_problem(info.shape.concrete(), dtype_size(info.dtype));
      if (!problem.empty()) return InvalidModel("value '" + vi.name() + "': shape " + info.shape.str() + " " + problem);
    }
  }
  return info;
}

// "" for ONNX's default domain, however a model spells it.
std::string canonical_domain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

// Every value name node `n` reads, its nested graphs' nodes included.
void collect_reads(const Node& n, std::unordered_set<std::string>* reads) {
  for (const auto& in : n.inputs) reads->insert(in);
  for (const auto& kv : n.attrs) {
    std::vector<std::shared_ptr<Graph>> subs = kv.second.graphs;
    if (kv.second.g) subs.push_back(kv.second.g);
    for (const auto& sub : subs) {
      for (const Node& m : sub->nodes) collect_reads(m, reads);
    }
  }
}

// ONNX asks for nodes in topological order, but converters do not always write them so (ONNX Runtime's float16
// converter appends an input's Cast after the node that reads it), and ONNX Runtime sorts them itself. Sorts the
// nodes stably: each after the producers of its inputs and of the outer values its nested graphs read, otherwise
// in file order. A graph with a cycle, or one that reads a value nothing produces, is left as it is, for
// verify_graph to name the value.
void sort_topologically(Graph* g) {
  const size_t n = g->nodes.size();
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& o : g->nodes[i].outputs) {
      if (!o.empty()) producer.emplace(o, i);
    }
  }
  std::vector<std::vector<size_t>> consumers(n);
  std::vector<size_t> pending(n, 0);
  bool in_order = true;
  for (size_t i = 0; i < n; ++i) {
    std::unordered_set<std::string> reads;
    collect_reads(g->nodes[i], &reads);
    std::unordered_set<size_t> deps;
    for (const auto& r : reads) {
      auto it = r.empty() ? producer.end() : producer.find(r);
      if (it != producer.end() && it->second != i) deps.insert(it->second);
    }
    for (size_t d : deps) {
      consumers[d].push_back(i);
      in_order = in_order && d < i;
    }
    pending[i] = deps.size();
  }
  if (in_order) return;
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;  // lowest file position first
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t c : consumers[i]) {
      if (--pending[c] == 0) ready.push(c);
    }
  }
  if (order.size() != n) return;  // a cycle
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (size_t i : order) sorted.push_back(std::move(g->nodes[i]));
  g->nodes = std::move(sorted);
}

struct Importer {
  std::string base_dir;
  int64_t opset = 0;
  // Model-local functions (FunctionProto) by "domain:name"; their calls are inlined.
  std::map<std::string, const onnx::FunctionProto*> functions;
  int inline_depth = 0;
  int64_t inline_count = 0;
  int graph_depth = 0;     // nesting of the graph being imported (0: the main graph)
  int64_t node_count = 0;  // nodes imported so far, nested graphs and inlined functions included

  static constexpr int kMaxInlineDepth = 32;
  // Limits on what a model may hold: deeper nesting or more nodes is refused as a malformed (or hostile) model,
  // before it can exhaust the stack or memory. Real models stay far below both.
  static constexpr int kMaxGraphDepth = 64;
  static constexpr int64_t kMaxNodes = int64_t{1} << 24;

  const onnx::FunctionProto* function_of(const onnx::NodeProto& np) const {
    auto it = functions.find(canonical_domain(np.domain()) + ":" + np.op_type());
    return it == functions.end() ? nullptr : it->second;
  }

  // The body of function `fn` as called by `call`: formal inputs and outputs become the call's values (an absent
  // optional input stays ""), every other value gets a name of its own, and attribute references (ref_attr_name)
  // take the call's attribute of that name (an unset one is dropped, leaving the op's default).
  std::vector<onnx::NodeProto> inline_call(const onnx::FunctionProto& fn, const onnx::NodeProto& call) {
    std::map<std::string, std::string> rename;
    for (int i = 0; i < fn.input_size(); ++i) rename[fn.input(i)] = i < call.input_size() ? call.input(i) : "";
    for (int i = 0; i < fn.output_size(); ++i) rename[fn.output(i)] = i < call.output_size() ? call.output(i) : "";
    const std::string prefix =
        (call.name().empty() ? fn.name() : call.name()) + "/" + std::to_string(inline_count++) + "/";
    auto name_of = [&](const std::string& v) -> std::string {
      if (v.empty()) return v;
      auto it = rename.find(v);
      if (it != rename.end()) return it->second;
      return rename[v] = prefix + v;
    };
    std::map<std::string, const onnx::AttributeProto*> call_attrs;
    for (const auto& a : call.attribute()) call_attrs[a.name()] = &a;
    std::vector<onnx::NodeProto> body;
    for (const auto& n : fn.node()) {
      onnx::NodeProto m = n;
      if (!m.name().empty()) m.set_name(prefix + m.name());
      for (int i = 0; i < m.input_size(); ++i) m.set_input(i, name_of(m.input(i)));
      for (int i = 0; i < m.output_size(); ++i) m.set_output(i, name_of(m.output(i)));
      m.clear_attribute();
      for (const auto& a : n.attribute()) {
        if (a.ref_attr_name().empty()) {
          *m.add_attribute() = a;
          continue;
        }
        auto it = call_attrs.find(a.ref_attr_name());
        if (it == call_attrs.end()) continue;
        onnx::AttributeProto* b = m.add_attribute();
        *b = *it->second;
        b->set_name(a.name());
      }
      body.push_back(std::move(m));
    }
    return body;
  }

  // Whether a node is replaced on import: a call of a model-local function, or a com.microsoft op that
  // contrib_lowering.h lowers.
  bool expands(const onnx::NodeProto& np) const { return function_of(np) || np.domain() == "com.microsoft"; }

  // The nodes of a graph with every call of a model-local function replaced by its body, and the com.microsoft ops
  // of contrib_lowering.h by their default-domain equivalents (recursively).
  Status expand_calls(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
                      std::vector<onnx::NodeProto>* out) {
    for (const auto& np : nodes) {
      const onnx::FunctionProto* fn = function_of(np);
      if (!fn) {
        bool lowered = false;
        TSR_ASSIGN_OR_RETURN(lowered, lower_contrib_op(np, out));
        if (!lowered) out->push_back(np);
        continue;
      }
      if (inline_depth >= kMaxInlineDepth) {
        return InvalidModel("function '" + np.domain() + "." + np.op_type() + "': calls nest deeper than " +
                            std::to_string(kMaxInlineDepth) + " (a recursive function?)");
      }
      google::protobuf::RepeatedPtrField<onnx::NodeProto> body;
      for (auto& n : inline_call(*fn, np)) *body.Add() = std::move(n);
      ++inline_depth;
      Status st = expand_calls(body, out);
      --inline_depth;
      TSR_RETURN_IF_ERROR(st);
    }
    return Status::Ok();
  }

  Expected<Attribute> attribute(const onnx::AttributeProto& a, const std::string& where) {
    Attribute out;
    using AP = onnx::AttributeProto;
    switch (a.type()) {
      case AP::FLOAT: out.kind = Attribute::Kind::kFloat; out.f = a.f(); break;
      case AP::INT: out.kind = Attribute::Kind::kInt; out.i = a.i(); break;
      case AP::STRING: out.kind = Attribute::Kind::kString; out.s = a.s(); break;
      case AP::TENSOR: {
        out.kind = Attribute::Kind::kTensor;
        TSR_ASSIGN_OR_RETURN(out.t, tensor_from_proto(a.t(), base_dir));
        break;
      }
      case AP::GRAPH: {
        out.kind = Attribute::Kind::kGraph;
        Graph g;
        TSR_RETURN_IF_ERROR(graph(a.g(), &g, true));
        out.g = std::make_shared<Graph>(std::move(g));
        break;
      }
      case AP::FLOATS: out.kind = Attribute::Kind::kFloats; out.floats.assign(a.floats().begin(), a.floats().end()); break;
      case AP::INTS: out.kind = Attribute::Kind::kInts; out.ints.assign(a.ints().begin(), a.ints().end()); break;
      case AP::STRINGS: out.kind = Attribute::Kind::kStrings; out.strings.assign(a.strings().begin(), a.strings().end()); break;
      case AP::TENSORS: {
        out.kind = Attribute::Kind::kTensors;
        for (const auto& t : a.tensors()) {
          Tensor x;
          TSR_ASSIGN_OR_RETURN(x, tensor_from_proto(t, base_dir));
          out.tensors.push_back(std::move(x));
        }
        break;
      }
      case AP::GRAPHS: {
        out.kind = Attribute::Kind::kGraphs;
        for (const auto& gp : a.graphs()) {
          Graph g;
          TSR_RETURN_IF_ERROR(graph(gp, &g, true));
          out.graphs.push_back(std::make_shared<Graph>(std::move(g)));
        }
        break;
      }
      default:
        return Unsupported(where + ": attribute '" + a.name() + "' has an unsupported type");
    }
    return out;
  }

  // Constant node -> tensor.
  Expected<Tensor> constant_value(const Node& n) {
    if (const Tensor* t = n.attr_tensor("value")) return *t;
    if (const Attribute* a = n.attr("value_float")) return Tensor::Scalar<float>(a->f);
    if (const Attribute* a = n.attr("value_int")) return Tensor::Scalar<int64_t>(a->i);
    if (const Attribute* a = n.attr("value_floats")) {
      return Tensor::FromVector<float>(a->floats, {static_cast<int64_t>(a->floats.size())});
    }
    if (const Attribute* a = n.attr("value_ints")) {
      return Tensor::FromVector<int64_t>(a->ints, {static_cast<int64_t>(a->ints.size())});
    }
    return Unsupported(n.describe() + ": only tensor, float(s) and int(s) constant values are supported");
  }

  Status graph(const onnx::GraphProto& gp, Graph* g, bool nested) {
    if (graph_depth >= kMaxGraphDepth) {
      return InvalidModel("graph '" + gp.name() + "': graphs nest deeper than " + std::to_string(kMaxGraphDepth));
    }
    ++graph_depth;
    Status st = graph_body(gp, g, nested);
    --graph_depth;
    return st;
  }

  Status graph_body(const onnx::GraphProto& gp, Graph* g, bool nested) {
    g->name = gp.name();
    g->opset = opset;
    for (const auto& init : gp.initializer()) {
      if (init.name().empty()) return InvalidModel("graph '" + gp.name() + "': initializer without a name");
      Tensor t;
      TSR_ASSIGN_OR_RETURN(t, tensor_from_proto(init, base_dir));
      g->values[init.name()] = ValueInfo{t.dtype(), Shape::FromDims(t.dims())};
      g->constants[init.name()] = std::move(t);
    }
    if (gp.sparse_initializer_size() > 0) return Unsupported("graph '" + gp.name() + "': sparse initializers are not supported");
    for (const auto& in : gp.input()) {
      ValueInfo vi;
      TSR_ASSIGN_OR_RETURN(vi, value_info_from_proto(in));
      if (g->constants.count(in.name())) continue;  // initializer listed as input (IR < 4 style)
      if (!nested && vi.dtype == DType::kUndefined) {
        return InvalidModel("graph input '" + in.name() + "' has no tensor type");
      }
      g->inputs.push_back(in.name());
      g->values[in.name()] = vi;
    }
    for (const auto& vi_proto : gp.value_info()) {
      ValueInfo vi;
      auto r = value_info_from_proto(vi_proto);
      if (!r.ok()) continue;  // extra annotations are advisory
      vi = r.value();
      if (!g->values.count(vi_proto.name())) g->values[vi_proto.name()] = vi;
    }
    std::vector<onnx::NodeProto> expanded;
    const bool any_call =
        std::any_of(gp.node().begin(), gp.node().end(), [&](const onnx::NodeProto& np) { return expands(np); });
    if (any_call) TSR_RETURN_IF_ERROR(expand_calls(gp.node(), &expanded));
    auto process = [&](const onnx::NodeProto& np) -> Status {
      if (++node_count > kMaxNodes) {
        return InvalidModel("model: more than " + std::to_string(kMaxNodes) + " nodes");
      }
      Node n;
      n.name = np.name();
      n.op_type = np.op_type();
      n.domain = canonical_domain(np.domain());
      n.inputs.assign(np.input().begin(), np.input().end());
      n.outputs.assign(np.output().begin(), np.output().end());
      if (n.name.empty()) n.name = n.op_type + "_" + std::to_string(g->nodes.size());
      for (const auto& ap : np.attribute()) {
        Attribute a;
        TSR_ASSIGN_OR_RETURN(a, attribute(ap, n.describe()));
        n.attrs[ap.name()] = std::move(a);
      }
      if (!n.domain.empty() && !OpRegistry::instance().find(n.domain, n.op_type)) {
        return Unsupported(n.describe() + ": domain '" + n.domain + "' is not supported");
      }
      if (n.domain.empty() && n.op_type == "Constant" && n.outputs.size() == 1 && !n.outputs[0].empty()) {
        Tensor t;
        TSR_ASSIGN_OR_RETURN(t, constant_value(n));
        g->values[n.outputs[0]] = ValueInfo{t.dtype(), Shape::FromDims(t.dims())};
        g->constants[n.outputs[0]] = std::move(t);
        return Status::Ok();
      }
      if (!OpRegistry::instance().find(n.domain, n.op_type)) {
        return Unsupported(n.describe() + ": operator '" + n.op_type + "' is not supported (opset " +
                           std::to_string(opset) + ")");
      }
      TSR_RETURN_IF_ERROR(check_arity(n, opset));
      g->nodes.push_back(std::move(n));
      return Status::Ok();
    };
    if (any_call) {
      for (const auto& np : expanded) TSR_RETURN_IF_ERROR(process(np));
    } else {
      for (const auto& np : gp.node()) TSR_RETURN_IF_ERROR(process(np));
    }
    sort_topologically(g);
    for (const auto& out : gp.output()) {
      ValueInfo vi;
      TSR_ASSIGN_OR_RETURN(vi, value_info_from_proto(out));
      g->outputs.push_back(out.name());
      auto it = g->values.find(out.name());
      if (it == g->values.end() || it->second.dtype == DType::kUndefined) g->values[out.name()] = vi;
    }
    return Status::Ok();
  }
};

}  // namespace

Expected<Tensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir) {
  const std::string where = "tensor '" + p.name() + "'";
  DType dt = dtype_from_onnx(p.data_type());
  if (!dtype_is_supported(dt)) {
    return Unsupported(where + ": element type " + std::to_string(p.data_type()) +
                       (p.data_type() == 8 ? " (string)" : "") + " is not supported");
  }
  Dims dims;
  for (int64_t d : p.dims()) {
    if (d < 0) return InvalidModel(where + ": negative dimension " + std::to_string(d));
    dims.push_back(d);
  }
  const size_t esize = dtype_size(dt);
  const std::string too_large = tensor_size_problem(dims, esize);
  if (!too_large.empty()) return InvalidModel(where + ": " + too_large);
  const int64_t n = numel(dims);
  if (p.segment().end() != 0) return Unsupported(where + ": segmented tensors are not supported");
  // What the data holds is checked against the shape before anything is allocated for it.
  std::string external;
  const std::string* raw = nullptr;
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    TSR_RETURN_IF_ERROR(load_external(p, base_dir, &external));
    raw = &external;
  } else if (p.has_raw_data()) {
    raw = &p.raw_data();
  }
  if (raw) {
    if (raw->size() != static_cast<size_t>(n) * esize) {
      return InvalidModel(where + ": raw data holds " + std::to_string(raw->size()) + " bytes, expected " +
                          std::to_string(static_cast<size_t>(n) * esize) + " for " +
                          std::string(dtype_name(dt)) + dims_str(dims));
    }
    Tensor t(dt, dims);
    if (n) std::memcpy(t.raw(), raw->data(), raw->size());
    if (dt == DType::kBool) {  // one byte per element, any non-zero byte true: stored as the 0 and 1 a bool holds
      auto* b = static_cast<uint8_t*>(t.raw());
      for (int64_t i = 0; i < n; ++i) b[i] = b[i] != 0;
    }
    return t;
  }
  int have = 0;  // values in the typed field this element type uses
  switch (dt) {
    case DType::kFloat32: have = p.float_data_size(); break;
    case DType::kFloat64: have = p.double_data_size(); break;
    case DType::kInt64: have = p.int64_data_size(); break;
    case DType::kUInt32:
    case DType::kUInt64: have = p.uint64_data_size(); break;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt32:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool: have = p.int32_data_size(); break;
    default: return Unsupported(where + ": element type not supported");
  }
  if (have != n) return InvalidModel(where + ": holds " + std::to_string(have) + " values, expected " + std::to_string(n));
  Tensor t(dt, dims);
  switch (dt) {
    case DType::kFloat32: copy_typed<float>(p.float_data(), &t); break;
    case DType::kFloat64: copy_typed<double>(p.double_data(), &t); break;
    case DType::kInt64: copy_typed<int64_t>(p.int64_data(), &t); break;
    case DType::kUInt32: copy_typed<uint32_t>(p.uint64_data(), &t); break;
    case DType::kUInt64: copy_typed<uint64_t>(p.uint64_data(), &t); break;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kUInt16: copy_typed<uint16_t>(p.int32_data(), &t); break;
    case DType::kInt32: copy_typed<int32_t>(p.int32_data(), &t); break;
    case DType::kInt16: copy_typed<int16_t>(p.int32_data(), &t); break;
    case DType::kInt8: copy_typed<int8_t>(p.int32_data(), &t); break;
    case DType::kUInt8: copy_typed<uint8_t>(p.int32_data(), &t); break;
    case DType::kBool: copy_typed<bool>(p.int32_data(), &t); break;
    default: break;
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) p->add_dims(d);
  p->set_raw_data(t.raw(), t.nbytes());
}

Expected<Graph> import_onnx_model(const onnx::ModelProto& model, const std::string& base_dir) {
  set_input_type_check(&check_input_types);
  Importer imp;
  imp.base_dir = base_dir;
  bool have_default = false;
  for (const auto& os : model.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") {
      have_default = true;
      imp.opset = os.version();
    }
  }
  if (!have_default) {
    if (model.ir_version() >= 3 || model.opset_import_size() > 0) {
      // Models may legally omit the default domain if they use no default ops.
      imp.opset = kMaxOpset;
    } else {
      imp.opset = 1;
    }
  }
  if (imp.opset < kMinOpset || imp.opset > kMaxOpset) {
    return Unsupported("model: default-domain opset " + std::to_string(imp.opset) + " is not supported (supported: " +
                       std::to_string(kMinOpset) + "-" + std::to_string(kMaxOpset) + ")");
  }
  if (!model.has_graph()) return InvalidModel("model: no graph");
  Graph g;
  g.ir_version = model.ir_version();
  g.producer_name = model.producer_name();
  for (const auto& f : model.functions()) {
    imp.functions[canonical_domain(f.domain()) + ":" + f.name()] = &f;
  }
  TSR_RETURN_IF_ERROR(imp.graph(model.graph(), &g, false));
  TSR_RETURN_IF_ERROR(verify_graph(g));
  return g;
}

Expected<Graph> import_onnx_bytes(const std::string& bytes, const std::string& base_dir, const std::string& what) {
  onnx::ModelProto model;
  if (bytes.empty()) return InvalidModel(what + ": file is empty");
  if (!parse_proto(bytes, &model)) return InvalidModel(what + ": not a valid ONNX model (protobuf parse failed)");
  auto g = import_onnx_model(model, base_dir);
  if (!g.ok()) return g.status().with_context(what + ": ");
  return g;
}

Expected<Graph> import_onnx_file(const std::string& path) {
  std::string bytes;
  TSR_ASSIGN_OR_RETURN(bytes, read_file(path));
  return import_onnx_bytes(bytes, dir_of(path), path);
}

Expected<Tensor> read_tensor_file(const std::string& path, std::string* name) {
  std::string bytes;
  TSR_ASSIGN_OR_RETURN(bytes, read_file(path));
  onnx::TensorProto p;
  if (!parse_proto(bytes, &p)) return InvalidInput(path + ": not a valid ONNX TensorProto");
  if (name) *name = p.name();
  auto t = tensor_from_proto(p, dir_of(path));
  if (!t.ok()) return Status(t.status().code() == ErrorCode::kInvalidModel ? ErrorCode::kInvalidInput : t.status().code(),
                             path + ": " + t.status().message());
  return t;
}

Expected<Dims> read_tensor_dims(const std::string& path) {
  using google::protobuf::internal::WireFormatLite;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open '" + path + "'");
  google::protobuf::io::FileInputStream file(fd);
  file.SetCloseOnDelete(true);
  google::protobuf::io::CodedInputStream in(&file);
  Dims dims;
  constexpr int kDims = 1;  // TensorProto.dims: repeated int64, packed or not
  bool ok = false;
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {  // the end of the file, or a malformed tag
      ok = in.ConsumedEntireMessage();
      break;
    }
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    uint64_t v = 0;
    if (field == kDims && wire == WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint64(&v)) break;
      dims.push_back(static_cast<int64_t>(v));
    } else if (field == kDims && wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t len = 0;
      if (!in.ReadVarint32(&len) || len > static_cast<uint32_t>(std::numeric_limits<int>::max())) break;
      const auto limit = in.PushLimit(static_cast<int>(len));
      while (in.BytesUntilLimit() > 0 && in.ReadVarint64(&v)) dims.push_back(static_cast<int64_t>(v));
      const bool whole = in.BytesUntilLimit() == 0;
      in.PopLimit(limit);
      if (!whole) break;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      break;
    }
  }
  // Skipping seeks, and a seek past the end succeeds: a truncated file ends before the position reached.
  struct stat st {};
  if (!ok || ::fstat(fd, &st) != 0 || in.CurrentPosition() > st.st_size) {
    return InvalidInput(path + ": not a valid ONNX TensorProto");
  }
  for (int64_t d : dims) {
    if (d < 0) return InvalidInput(path + ": not a valid ONNX TensorProto (negative dim)");
  }
  return dims;
}

Status write_tensor_file(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_proto(t, name, &p);
  std::ofstream f(path, std::ios::binary);
  if (!f) return IoError("cannot write '" + path + "'");
  if (!p.SerializeToOstream(&f)) return IoError("cannot write '" + path + "'");
  return Status::Ok();
}

}  // namespace tessera
