#include "onnx_mutator.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace tessera_fuzz {
namespace {

using Rng = std::mt19937;

int64_t interesting_int(Rng& rng) {
  static const int64_t kValues[] = {-2, -1, 0, 1, 2, 3, 4, 7, 8, 16, 255, 1 << 20, INT32_MAX, INT64_MAX, INT64_MIN,
                                    int64_t{1} << 40};
  return kValues[rng() % (sizeof(kValues) / sizeof(kValues[0]))];
}

template <class T>
T* pick(google::protobuf::RepeatedPtrField<T>* field, Rng& rng) {
  return field->empty() ? nullptr : field->Mutable(static_cast<int>(rng() % field->size()));
}

// Every graph of the model (the main graph, then the bodies of If/Loop/Scan attributes).
void collect_graphs(onnx::GraphProto* g, std::vector<onnx::GraphProto*>* out) {
  out->push_back(g);
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) collect_graphs(a.mutable_g(), out);
      for (auto& sub : *a.mutable_graphs()) collect_graphs(&sub, out);
    }
  }
}

std::vector<std::string> value_names(const onnx::GraphProto& g) {
  std::vector<std::string> names;
  for (const auto& v : g.input()) names.push_back(v.name());
  for (const auto& t : g.initializer()) names.push_back(t.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) names.push_back(o);
  }
  return names;
}

void mutate_type(onnx::TypeProto* type, Rng& rng) {
  if (rng() % 4 == 0) {
    type->mutable_tensor_type()->set_elem_type(static_cast<int32_t>(rng() % 18));
    return;
  }
  auto* shape = type->mutable_tensor_type()->mutable_shape();
  switch (rng() % 4) {
    case 0:
      shape->add_dim()->set_dim_value(interesting_int(rng));
      break;
    case 1:
      if (shape->dim_size() > 0) shape->mutable_dim()->RemoveLast();
      break;
    case 2:
      if (auto* d = pick(shape->mutable_dim(), rng)) d->set_dim_param("n" + std::to_string(rng() % 3));
      break;
    default:
      if (auto* d = pick(shape->mutable_dim(), rng)) d->set_dim_value(interesting_int(rng) & 0xff);
      break;
  }
}

void mutate_attribute(onnx::AttributeProto* a, Rng& rng) {
  switch (rng() % 5) {
    case 0:
      a->set_i(interesting_int(rng));
      break;
    case 1:
      if (a->ints_size() > 0) {
        a->set_ints(static_cast<int>(rng() % a->ints_size()), interesting_int(rng));
      } else {
        a->add_ints(interesting_int(rng));
      }
      break;
    case 2:
      if (a->ints_size() > 0) a->mutable_ints()->RemoveLast();
      break;
    case 3:
      a->set_f(static_cast<float>(interesting_int(rng)) / 4);
      break;
    default:
      a->set_s(std::to_string(rng() % 3));
      break;
  }
}

void mutate_tensor(onnx::TensorProto* t, Rng& rng) {
  switch (rng() % 4) {
    case 0:
      if (t->dims_size() > 0) t->set_dims(static_cast<int>(rng() % t->dims_size()), interesting_int(rng));
      break;
    case 1:
      t->set_data_type(static_cast<int32_t>(rng() % 18));
      break;
    case 2:
      if (!t->raw_data().empty()) t->mutable_raw_data()->resize(rng() % t->raw_data().size());
      break;
    default:
      if (!t->raw_data().empty()) (*t->mutable_raw_data())[rng() % t->raw_data().size()] ^= static_cast<char>(rng());
      break;
  }
}

void mutate_graph(onnx::GraphProto* g, const std::vector<std::string>& ops, Rng& rng) {
  onnx::NodeProto* n = pick(g->mutable_node(), rng);
  switch (rng() % 9) {
    case 0:
    case 1:
      if (n) {
        if (auto* a = pick(n->mutable_attribute(), rng)) mutate_attribute(a, rng);
      }
      break;
    case 2:
      if (n && !ops.empty()) n->set_op_type(ops[rng() % ops.size()]);
      break;
    case 3:
      if (n) {
        auto names = value_names(*g);
        if (!names.empty() && n->input_size() > 0) {
          n->set_input(static_cast<int>(rng() % n->input_size()), names[rng() % names.size()]);
        } else if (!names.empty()) {
          n->add_input(names[rng() % names.size()]);
        }
      }
      break;
    case 4:
      if (n && n->input_size() > 0) n->mutable_input()->RemoveLast();
      break;
    case 5:
      if (auto* v = pick(g->mutable_input(), rng)) mutate_type(v->mutable_type(), rng);
      break;
    case 6:
      if (auto* v = pick(g->mutable_value_info(), rng)) {
        mutate_type(v->mutable_type(), rng);
      } else if (auto* o = pick(g->mutable_output(), rng)) {
        mutate_type(o->mutable_type(), rng);
      }
      break;
    case 7:
      if (auto* t = pick(g->mutable_initializer(), rng)) mutate_tensor(t, rng);
      break;
    default:
      if (g->node_size() > 1) {  // out of topological order: the importer sorts
        int from = static_cast<int>(rng() % g->node_size()), to = static_cast<int>(rng() % g->node_size());
        g->mutable_node()->SwapElements(from, to);
      }
      break;
  }
}

}  // namespace

size_t mutate_onnx_model(uint8_t* data, size_t size, size_t max_size, unsigned seed) {
  Rng rng(seed);
  onnx::ModelProto model;
  if (rng() % 4 == 0 || !model.ParseFromArray(data, static_cast<int>(size))) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  std::vector<onnx::GraphProto*> graphs;
  collect_graphs(model.mutable_graph(), &graphs);
  std::vector<std::string> ops;
  for (auto* g : graphs) {
    for (const auto& n : g->node()) ops.push_back(n.op_type());
  }
  if (rng() % 10 == 0) {
    if (auto* o = pick(model.mutable_opset_import(), rng)) o->set_version(static_cast<int64_t>(rng() % 24));
  } else {
    mutate_graph(graphs[rng() % graphs.size()], ops, rng);
  }
  std::string out;
  if (!model.SerializeToString(&out) || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

bool onnx_model_has_loops(const uint8_t* data, size_t size) {
  onnx::ModelProto model;
  if (!model.ParseFromArray(data, static_cast<int>(size))) return false;
  std::vector<onnx::GraphProto*> graphs;
  collect_graphs(model.mutable_graph(), &graphs);
  for (auto* g : graphs) {
    for (const auto& n : g->node()) {
      if (n.op_type() == "Loop" || n.op_type() == "Scan") return true;
    }
  }
  return false;
}

}  // namespace tessera_fuzz
