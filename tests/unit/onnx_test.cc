#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "onnx/onnx_export.h"
#include "onnx/onnx_import.h"
#include "passes/shape_inference.h"

namespace tessera {
namespace {

onnx::ModelProto tiny_model() {
  onnx::ModelProto m;
  m.set_ir_version(7);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  tt->mutable_shape()->add_dim()->set_dim_param("N");
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  // Initializer in a typed field, listed as an input too (old exporters).
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(2);
  w->add_float_data(0.5f);
  w->add_float_data(-1.f);
  g->add_input()->set_name("w");
  auto* n = g->add_node();
  n->set_op_type("Mul");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  return m;
}

TEST(OnnxImport, ReadsTypedInitializersListedAsInputsAndSymbolicDims) {
  auto g = import_onnx_model(tiny_model(), "");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->inputs.size(), 1u);  // w is a constant, not a runtime input
  EXPECT_EQ(g->info("x")->shape.str(), "[N,2]");
  ASSERT_TRUE(g->is_constant("w"));
  EXPECT_EQ(g->constant("w")->data<float>()[1], -1.f);
  EXPECT_EQ(g->nodes[0].name, "Mul_0");  // unnamed nodes get a stable name
}

TEST(OnnxImport, RejectsUnknownOpWithNodeName) {
  auto m = tiny_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  m.mutable_graph()->mutable_node(0)->set_name("weird");
  auto g = import_onnx_model(m, "");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(g.status().message().find("'weird'"), std::string::npos);
  EXPECT_NE(g.status().message().find("NoSuchOp"), std::string::npos);
}

TEST(OnnxImport, RejectsGarbageAndOpsetOutOfRange) {
  EXPECT_EQ(import_onnx_bytes("\x08\x07garbage\xff\xff", "").status().code(), ErrorCode::kInvalidModel);
  EXPECT_EQ(import_onnx_bytes("", "").status().code(), ErrorCode::kInvalidModel);
  auto m = tiny_model();
  m.mutable_opset_import(0)->set_version(99);
  EXPECT_EQ(import_onnx_model(m, "").status().code(), ErrorCode::kUnsupported);
}

TEST(OnnxImport, RejectsRawDataOfWrongSize) {
  auto m = tiny_model();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_raw_data(std::string(7, '\0'));
  auto g = import_onnx_model(m, "");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'w'"), std::string::npos);
}

TEST(OnnxImport, ReadsExternalDataNextToTheModelAndRefusesEscapes) {
  std::string dir = ::testing::TempDir() + "/extdata";
  std::filesystem::create_directories(dir);
  float values[4] = {9.f, 0.5f, -1.f, 7.f};  // w = values[1..2] at byte offset 4
  {
    std::ofstream f(dir + "/weights.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(values), sizeof values);
  }
  auto m = tiny_model();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const char* v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", "weights.bin");
  add("offset", "4");
  add("length", "8");
  {
    std::ofstream f(dir + "/model.onnx", std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&f));
  }
  auto g = import_onnx_file(dir + "/model.onnx");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->constant("w")->data<float>()[0], 0.5f);
  EXPECT_EQ(g->constant("w")->data<float>()[1], -1.f);

  w->mutable_external_data(0)->set_value("../outside.bin");
  EXPECT_FALSE(import_onnx_model(m, dir).ok());
  w->mutable_external_data(0)->set_value("weights.bin");
  w->mutable_external_data(1)->set_value("12");  // 12 + 8 > 16 bytes
  auto past_end = import_onnx_model(m, dir);
  ASSERT_FALSE(past_end.ok());
  EXPECT_NE(past_end.status().message().find("past the end"), std::string::npos);
}

// x -> Relu -> r -> Neg -> y, written Neg first: converters do this (ONNX Runtime's float16 converter appends an
// input's Cast after its consumer), and ONNX Runtime sorts the nodes itself.
onnx::ModelProto out_of_order_model() {
  auto m = tiny_model();
  auto* g = m.mutable_graph();
  g->clear_node();
  auto* neg = g->add_node();
  neg->set_op_type("Neg");
  neg->set_name("neg");
  neg->add_input("r");
  neg->add_output("y");
  auto* relu = g->add_node();
  relu->set_op_type("Relu");
  relu->set_name("relu");
  relu->add_input("x");
  relu->add_output("r");
  return m;
}

TEST(OnnxImport, SortsNodesWrittenOutOfTopologicalOrder) {
  auto g = import_onnx_model(out_of_order_model(), "");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].name, "relu");
  EXPECT_EQ(g->nodes[1].name, "neg");
}

TEST(OnnxImport, RejectsACycleNamingTheValue) {
  auto m = out_of_order_model();
  m.mutable_graph()->mutable_node(1)->set_input(0, "y");  // relu reads neg's output: a cycle
  auto g = import_onnx_model(m, "");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kInvalidModel);
  EXPECT_NE(g.status().message().find("is not produced by an earlier node"), std::string::npos)
      << g.status().message();
}

// PyTorch writes value_info entries with an empty TypeProto inside If branches; ONNX Runtime ignores them.
TEST(OnnxImport, IgnoresEmptyTypesOfValueInfoAndNestedOutputs) {
  auto m = tiny_model();
  auto* g = m.mutable_graph();
  auto* vi = g->add_value_info();
  vi->set_name("y");
  vi->mutable_type();  // present, empty
  auto* out = g->mutable_output(0);
  out->mutable_type()->Clear();  // the graph output's type is empty too
  auto r = import_onnx_model(m, "");
  ASSERT_TRUE(r.ok()) << r.status().message();
  // A sequence type is still refused, by name.
  out->mutable_type()->mutable_sequence_type();
  r = import_onnx_model(m, "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'y'"), std::string::npos) << r.status().message();
}

// Inputs are held to the types ONNX's schema gives them, as ONNX Runtime does: a fixed type (Pad's int64 pads) is not
// converted from another, a type parameter takes only its allowed types, and one parameter binds one type.
TEST(OnnxImport, RefusesInputTypesTheSchemaDoesNotAllow) {
  auto refused = [](const onnx::ModelProto& m, const char* what) {  // by shape inference, after the import
    auto g = import_onnx_model(m, "");
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Status st = infer_shapes(*g);
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.code(), ErrorCode::kInvalidModel) << st.message();
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  auto m = tiny_model();
  m.mutable_graph()->mutable_node(0)->set_op_type("Pad");  // Pad(x, pads=w): w is float, pads is tensor(int64)
  refused(m, "takes tensor(int64)");
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_type(onnx::TensorProto::INT64);
  w->set_dims(0, 4);
  for (int i = 0; i < 4; ++i) w->add_int64_data(1);
  auto g = import_onnx_model(m, "");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(infer_shapes(*g).ok());
  EXPECT_EQ(g->info("y")->shape.str(), "[?,4]");

  const onnx::TensorProto int64_w = *w;
  m = tiny_model();  // Mul(x float, w int64): one type T for both
  *m.mutable_graph()->mutable_initializer(0) = int64_w;
  refused(m, "the op takes one type T for both");

  m = tiny_model();  // Sqrt of int32: T is a float type
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT32);
  m.mutable_graph()->mutable_node(0)->set_op_type("Sqrt");
  m.mutable_graph()->mutable_node(0)->mutable_input()->RemoveLast();
  refused(m, "is int32");
}

// A declared shape whose element count overflows 64 bits was a silent empty tensor; it is an error naming the value.
TEST(OnnxImport, RejectsDeclaredShapesBeyondSixtyFourBits) {
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{
           {int64_t{1} << 40, int64_t{1} << 40}, {int64_t{1} << 62, 4}, {int64_t{1} << 61, 1}}) {
    auto m = tiny_model();
    auto* shape = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
    auto g = import_onnx_model(m, "");
    ASSERT_FALSE(g.ok()) << dims_str(dims);
    EXPECT_EQ(g.status().code(), ErrorCode::kInvalidModel);
    EXPECT_NE(g.status().message().find("'x'"), std::string::npos) << g.status().message();
  }
}

// Graphs nested beyond the limit are refused (they would otherwise recurse without bound); real models nest a few.
TEST(OnnxImport, RejectsGraphsNestedTooDeeply) {
  auto nested_model = [](int depth) {
    auto m = tiny_model();
    onnx::GraphProto* g = m.mutable_graph();
    g->clear_node();
    for (int d = 0; d < depth; ++d) {
      auto* n = g->add_node();
      n->set_op_type("If");
      n->add_input("c");
      n->add_output(d == 0 ? "y" : "o" + std::to_string(d));
      auto* a = n->add_attribute();
      a->set_name("then_branch");
      a->set_type(onnx::AttributeProto::GRAPH);
      g = a->mutable_g();
      g->set_name("level" + std::to_string(d));
      g->add_output()->set_name("o" + std::to_string(d + 1));
    }
    auto* leaf = g->add_node();
    leaf->set_op_type("Identity");
    leaf->add_input("x");
    leaf->add_output("o" + std::to_string(depth));
    return m;
  };
  auto deep = import_onnx_model(nested_model(100), "");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), ErrorCode::kInvalidModel);
  EXPECT_NE(deep.status().message().find("nest deeper than 64"), std::string::npos) << deep.status().message();
  // Within the limit the nesting itself is no error (the model may still fail its checks: the branches lack else).
  auto shallow = import_onnx_model(nested_model(3), "");
  if (!shallow.ok()) {
    EXPECT_EQ(shallow.status().message().find("nest deeper"), std::string::npos);
  }
}

TEST(OnnxExport, RoundTripsGraphWithShapesAndConstants) {
  auto g = import_onnx_model(tiny_model(), "");
  ASSERT_TRUE(g.ok());
  g->values["y"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("N"), Dim(2)})};
  auto bytes = export_onnx_bytes(*g);
  ASSERT_TRUE(bytes.ok());
  auto back = import_onnx_bytes(*bytes, "");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->inputs, g->inputs);
  EXPECT_EQ(back->outputs, g->outputs);
  EXPECT_EQ(back->info("y")->shape.str(), "[N,2]");
  EXPECT_EQ(back->constant("w")->data<float>()[0], 0.5f);
  EXPECT_EQ(back->nodes.size(), 1u);
  EXPECT_EQ(back->nodes[0].op_type, "Mul");
}

TEST(TensorIo, WritesAndReadsTensorProtoFiles) {
  Tensor t = Tensor::FromVector<int64_t>({1, -2, 3}, {3});
  std::string path = ::testing::TempDir() + "/t.pb";
  ASSERT_TRUE(write_tensor_file(path, t, "ids").ok());
  std::string name;
  auto r = read_tensor_file(path, &name);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(name, "ids");
  EXPECT_EQ(r->dtype(), DType::kInt64);
  EXPECT_EQ(r->data<int64_t>()[1], -2);
}

TEST(TensorIo, ReadsDimsWithoutTheDataInAnyFieldOrder) {
  const std::string dir = ::testing::TempDir();
  auto write = [](const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
  };
  // As Tessera (and ONNX) write it: dims packed, first.
  ASSERT_TRUE(write_tensor_file(dir + "/a.pb", Tensor(DType::kFloat32, Dims{3, 1, 4}), "x").ok());
  auto d = read_tensor_dims(dir + "/a.pb");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(*d, (Dims{3, 1, 4}));
  // Dims unpacked, after the data and the name.
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.set_raw_data(std::string(2 * 5 * 4, '\0'));
  p.set_name("late");
  std::string bytes;
  ASSERT_TRUE(p.SerializeToString(&bytes));
  for (int64_t v : {2, 5}) {
    bytes += static_cast<char>(0x08);  // field 1, varint
    bytes += static_cast<char>(v);
  }
  write(dir + "/b.pb", bytes);
  d = read_tensor_dims(dir + "/b.pb");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(*d, (Dims{2, 5}));
  // A scalar has no dims; a truncated file and garbage are refused, a missing file too.
  ASSERT_TRUE(write_tensor_file(dir + "/c.pb", Tensor::FromVector<float>({1.f}, {}), "s").ok());
  d = read_tensor_dims(dir + "/c.pb");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());
  write(dir + "/d.pb", bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(read_tensor_dims(dir + "/d.pb").ok());
  write(dir + "/e.pb", "\xff\xff\xff\xff\xff");
  EXPECT_FALSE(read_tensor_dims(dir + "/e.pb").ok());
  EXPECT_FALSE(read_tensor_dims(dir + "/none.pb").ok());
}

}  // namespace
}  // namespace tessera
