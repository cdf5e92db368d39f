#include "onnx/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <functional>
#include <fstream>
#include <unordered_set>

#include "onnx/onnx_import.h"

namespace tessera {

namespace {

void set_type(const ValueInfo& vi, onnx::ValueInfoProto* p) {
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(vi.dtype));
  if (!vi.shape.rank_known) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : vi.shape.dims) {
    auto* dp = shape->add_dim();
    if (d.known()) dp->set_dim_value(d.value);
    else if (!d.symbol.empty()) dp->set_dim_param(d.symbol);
  }
}

Status export_graph(const Graph& g, onnx::GraphProto* gp, size_t elide_above = kKeepAllData);

Status export_attribute(const std::string& name, const Attribute& a, onnx::AttributeProto* ap) {
  using AP = onnx::AttributeProto;
  ap->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::kFloat: ap->set_type(AP::FLOAT); ap->set_f(a.f); break;
    case Attribute::Kind::kInt: ap->set_type(AP::INT); ap->set_i(a.i); break;
    case Attribute::Kind::kString: ap->set_type(AP::STRING); ap->set_s(a.s); break;
    case Attribute::Kind::kTensor: ap->set_type(AP::TENSOR); tensor_to_proto(a.t, "", ap->mutable_t()); break;
    case Attribute::Kind::kGraph:
      ap->set_type(AP::GRAPH);
      TSR_RETURN_IF_ERROR(export_graph(*a.g, ap->mutable_g()));
      break;
    case Attribute::Kind::kFloats:
      ap->set_type(AP::FLOATS);
      for (float f : a.floats) ap->add_floats(f);
      break;
    case Attribute::Kind::kInts:
      ap->set_type(AP::INTS);
      for (int64_t i : a.ints) ap->add_ints(i);
      break;
    case Attribute::Kind::kStrings:
      ap->set_type(AP::STRINGS);
      for (const auto& s : a.strings) ap->add_strings(s);
      break;
    case Attribute::Kind::kTensors:
      ap->set_type(AP::TENSORS);
      for (const auto& t : a.tensors) tensor_to_proto(t, "", ap->add_tensors());
      break;
    case Attribute::Kind::kGraphs:
      ap->set_type(AP::GRAPHS);
      for (const auto& sg : a.graphs) TSR_RETURN_IF_ERROR(export_graph(*sg, ap->add_graphs()));
      break;
  }
  return Status::Ok();
}

Status export_graph(const Graph& g, onnx::GraphProto* gp, size_t elide_above) {
  gp->set_name(g.name.empty() ? "tessera" : g.name);
  // Deterministic initializer order.
  std::vector<std::string> names;
  for (const auto& kv : g.constants) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const Tensor& t = g.constants.at(n);
    onnx::TensorProto* p = gp->add_initializer();
    if (t.nbytes() <= elide_above) {
      tensor_to_proto(t, n, p);
      continue;
    }
    p->set_name(n);
    p->set_data_type(static_cast<int32_t>(t.dtype()));
    for (int64_t d : t.dims()) p->add_dims(d);
    p->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* loc = p->add_external_data();
    loc->set_key("location");
    loc->set_value(kElidedLocation);
  }

  std::unordered_set<std::string> io;
  for (const auto& in : g.inputs) {
    auto* vi = gp->add_input();
    vi->set_name(in);
    const ValueInfo* info = g.info(in);
    if (info && info->dtype != DType::kUndefined) set_type(*info, vi);
    io.insert(in);
  }
  for (const auto& out : g.outputs) {
    auto* vi = gp->add_output();
    vi->set_name(out);
    const ValueInfo* info = g.info(out);
    if (info && info->dtype != DType::kUndefined) set_type(*info, vi);
    io.insert(out);
  }
  for (const Node& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    if (!n.domain.empty()) np->set_domain(n.domain);
    for (const auto& i : n.inputs) np->add_input(i);
    for (const auto& o : n.outputs) np->add_output(o);
    for (const auto& kv : n.attrs) TSR_RETURN_IF_ERROR(export_attribute(kv.first, kv.second, np->add_attribute()));
    for (const auto& o : n.outputs) {
      if (o.empty() || io.count(o)) continue;
      const ValueInfo* info = g.info(o);
      if (!info || info->dtype == DType::kUndefined) continue;
      auto* vi = gp->add_value_info();
      vi->set_name(o);
      set_type(*info, vi);
    }
  }
  return Status::Ok();
}

}  // namespace

Status export_onnx_model(const Graph& g, onnx::ModelProto* model, size_t elide_above) {
  model->Clear();
  model->set_ir_version(std::max<int64_t>(g.ir_version, 7));
  model->set_producer_name("tessera");
  model->set_producer_version(TESSERA_VERSION);
  auto* os = model->add_opset_import();
  os->set_domain("");
  os->set_version(g.opset);
  std::unordered_set<std::string> domains;
  std::function<void(const Graph&)> collect = [&](const Graph& sg) {
    for (const Node& n : sg.nodes) {
      if (!n.domain.empty()) domains.insert(n.domain);
      for (const auto& kv : n.attrs) {
        if (kv.second.g) collect(*kv.second.g);
        for (const auto& x : kv.second.graphs) collect(*x);
      }
    }
  };
  collect(g);
  for (const auto& d : domains) {
    auto* o = model->add_opset_import();
    o->set_domain(d);
    o->set_version(1);
  }
  return export_graph(g, model->mutable_graph(), elide_above);
}

Expected<std::string> export_onnx_bytes(const Graph& g, size_t elide_above) {
  onnx::ModelProto m;
  TSR_RETURN_IF_ERROR(export_onnx_model(g, &m, elide_above));
  std::string out;
  if (!m.SerializeToString(&out)) return InternalError("model serialization failed (larger than 2 GiB?)");
  return out;
}

Status export_onnx_file(const Graph& g, const std::string& path) {
  std::string bytes;
  TSR_ASSIGN_OR_RETURN(bytes, export_onnx_bytes(g));
  std::ofstream f(path, std::ios::binary);
  if (!f || !f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return IoError("cannot write '" + path + "'");
  }
  return Status::Ok();
}

std::string with_model_metadata(std::string model, const std::string& key, const std::string& value) {
  onnx::ModelProto extra;
  auto* p = extra.add_metadata_props();
  p->set_key(key);
  p->set_value(value);
  return model + extra.SerializeAsString();
}

}  // namespace tessera
