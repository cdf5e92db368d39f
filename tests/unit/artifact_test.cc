#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "artifact/artifact.h"
#include "artifact/artifact_format.h"
#include "artifact/crc32c.h"
#include "runtime/session.h"

namespace tessera {
namespace {

using nlohmann::json;
namespace fmt = artifact;

// A per-test scratch directory, removed afterwards.
class ArtifactTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera_artifact_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Tensor iota(DType dt, Dims dims, float scale) {
  Tensor t(dt, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * static_cast<float>((i * 7) % 11 - 5);
  return t;
}

Node node(const std::string& name, const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// y = Relu(x @ w + b), x [batch,4]; one engine that (notionally) computes m
// from x with w, with a 1000-byte blob.
Program mlp_program() {
  Program p;
  Graph& g = p.graph;
  g.name = "mlp";
  g.opset = 13;
  g.producer_name = "unit-test";
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("batch"), Dim(4)})};
  Tensor w = iota(DType::kFloat32, {4, 3}, 0.5f);
  Tensor b = iota(DType::kFloat32, {3}, 0.25f);
  p.constants["w"] = w;
  p.constants["b"] = b;
  g.constants["w"] = w;
  g.constants["b"] = b;
  g.nodes = {node("mm", "MatMul", {"x", "w"}, {"m"}), node("add", "Add", {"m", "b"}, {"s"}),
             node("relu", "Relu", {"s"}, {"y"})};
  g.outputs = {"y"};
  g.values["y"] = ValueInfo{DType::kFloat32, Shape({Dim::Symbol("batch"), Dim(3)})};

  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  EngineSpec e;
  e.region = "region_0";
  e.backend = "dnnl";
  e.backend_version = "2.6.3";
  e.options = "threads=1";
  e.inputs = {"x"};
  e.outputs = {"m"};
  e.constants = {{"w", "W0"}};
  e.blob = Blob::Copy(bytes.data(), bytes.size());
  p.engines.push_back(e);

  p.meta.producer_version = "0.1.0";
  p.meta.source_model = "mlp.onnx";
  p.meta.backends = {{"dnnl", "2.6.3", "", "openmp"}, {"native", "", "", "pool"}};
  p.meta.shape_overrides = {"x=2,4"};
  return p;
}

// mlp_program with a bucket at x [2,4]: the glue graph with x pinned and a `b` of other contents (as shape
// arithmetic folded for a bucket's dims would give), and an engine of its own reading w (shared) and b (renamed).
Program bucketed_program() {
  Program p = mlp_program();
  Program b = mlp_program();
  b.graph.values["x"].shape = Shape::FromDims({2, 4});
  Tensor b2 = iota(DType::kFloat32, {3}, -0.5f);
  b.constants["b"] = b2;
  b.graph.constants["b"] = b2;
  b.engines[0].constants.push_back({"b", "B0"});
  EXPECT_TRUE(add_bucket(p, std::move(b), {{2, 4}}).ok());
  return p;
}

std::vector<Tensor> run_graph(const Graph& g, const std::vector<Tensor>& inputs) {
  auto s = InferenceSession::Create(g);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return {};
  auto out = (*s)->run(inputs);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out.value() : std::vector<Tensor>{};
}

void expect_same_bytes(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.dims(), b.dims());
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
}

// --- the container, read back by hand for the corruption tests -------------

struct Entry {
  uint32_t kind;
  uint64_t offset, size;
};

std::vector<Entry> table_of(const std::string& f) {
  const auto* b = reinterpret_cast<const uint8_t*>(f.data());
  std::vector<Entry> out;
  uint32_t n = fmt::get_u32(b + fmt::kOffSectionCount);
  uint64_t t = fmt::get_u64(b + fmt::kOffTableOffset);
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* e = b + t + i * fmt::kEntrySize;
    out.push_back(
        {fmt::get_u32(e + fmt::kEntKind), fmt::get_u64(e + fmt::kEntOffset), fmt::get_u64(e + fmt::kEntSize)});
  }
  return out;
}

// Recomputes every checksum, so that a deliberate edit reaches the checks
// behind them.
void fix_checksums(std::string& f) {
  auto* b = reinterpret_cast<uint8_t*>(f.data());
  uint32_t n = fmt::get_u32(b + fmt::kOffSectionCount);
  uint64_t t = fmt::get_u64(b + fmt::kOffTableOffset);
  for (uint32_t i = 0; i < n; ++i) {
    uint8_t* e = b + t + i * fmt::kEntrySize;
    uint64_t off = fmt::get_u64(e + fmt::kEntOffset), size = fmt::get_u64(e + fmt::kEntSize);
    if (off <= f.size() && size <= f.size() - off) fmt::put_u32(e + fmt::kEntCrc, crc32c(b + off, size));
  }
  fmt::put_u32(b + fmt::kOffTableCrc, crc32c(b + t, n * fmt::kEntrySize));
  fmt::put_u32(b + fmt::kOffHeaderCrc, crc32c(b, fmt::kOffHeaderCrc));
}

// Rewrites the file with one section's bytes replaced (checksums valid).
void replace_section(const std::string& in, const std::string& out, fmt::SectionKind kind, const std::string& bytes) {
  std::string f = read_bytes(in);
  std::vector<fmt::OutSection> sections;
  for (const Entry& e : table_of(f)) {
    fmt::OutSection s;
    s.kind = static_cast<fmt::SectionKind>(e.kind);
    s.alignment = e.kind == static_cast<uint32_t>(fmt::SectionKind::kConstants) ? fmt::kConstantsAlignment
                                                                                : fmt::kSectionAlignment;
    const char* data = e.kind == static_cast<uint32_t>(kind) ? bytes.data() : f.data() + e.offset;
    s.size = e.kind == static_cast<uint32_t>(kind) ? bytes.size() : e.size;
    s.pieces.push_back({0, data, static_cast<size_t>(s.size)});
    sections.push_back(std::move(s));
  }
  // The input's format version kept (a masked bucket's META needs format 3).
  const uint32_t version = fmt::get_u32(reinterpret_cast<const uint8_t*>(f.data()) + fmt::kOffVersion);
  ASSERT_TRUE(fmt::write_container(out, sections, version).ok());
}

json meta_of(const std::string& path) {
  std::string f = read_bytes(path);
  for (const Entry& e : table_of(f)) {
    if (e.kind == static_cast<uint32_t>(fmt::SectionKind::kMeta)) return json::parse(f.substr(e.offset, e.size));
  }
  return json();
}

// --- CRC-32C ---------------------------------------------------------------

TEST(ArtifactCrc32c, MatchesPublishedVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  uint8_t zeros[32] = {}, ones[32], inc[32];
  std::memset(ones, 0xFF, sizeof ones);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(zeros, 32), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones, 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc, 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(ArtifactCrc32c, HardwarePathAgreesWithTablesAtEverySizeAndAlignmentAndChains) {
  std::vector<uint8_t> buf(200003);
  std::mt19937 rng(7);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t n : {0, 1, 7, 8, 9, 63, 4096, 24575, 24576, 24577, 49152, 73729, 200000}) {
    for (size_t off : {0, 1, 3}) {
      const uint8_t* p = buf.data() + off;
      uint32_t whole = crc32c(p, n);
      EXPECT_EQ(whole, crc32c_portable(p, n)) << n << " at +" << off;
      EXPECT_EQ(whole, crc32c(p + n / 3, n - n / 3, crc32c(p, n / 3))) << n;
    }
  }
}

// --- round trips -----------------------------------------------------------

TEST_F(ArtifactTest, RoundTripRunsExactlyLikeTheOriginalProgram) {
  Program p = mlp_program();
  ASSERT_TRUE(write_artifact(p, path("m.tsr")).ok());
  EXPECT_TRUE(is_artifact_file(path("m.tsr")));
  auto r = read_artifact(path("m.tsr"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Program& q = r.value();

  Tensor x = iota(DType::kFloat32, {2, 4}, 1.f);
  auto before = run_graph(p.graph, {x});
  auto after = run_graph(q.graph, {x});
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(after.size(), 1u);
  expect_same_bytes(before[0], after[0]);

  EXPECT_EQ(q.graph.name, "mlp");
  EXPECT_EQ(q.graph.producer_name, "unit-test");
  EXPECT_EQ(q.graph.opset, 13);
  EXPECT_EQ(q.graph.inputs, p.graph.inputs);
  EXPECT_EQ(q.graph.outputs, p.graph.outputs);
  EXPECT_EQ(q.graph.info("x")->shape.str(), "[batch,4]");
  EXPECT_EQ(q.graph.constants.size(), 2u);
  EXPECT_EQ(q.meta.producer, "tessera");
  EXPECT_EQ(q.meta.producer_version, "0.1.0");
  EXPECT_EQ(q.meta.source_model, "mlp.onnx");
  ASSERT_EQ(q.meta.backends.size(), 2u);
  EXPECT_EQ(q.meta.backends[0].name, "dnnl");
  EXPECT_EQ(q.meta.backends[0].version, "2.6.3");
  EXPECT_EQ(q.meta.shape_overrides, std::vector<std::string>{"x=2,4"});
  ASSERT_EQ(q.engines.size(), 1u);
  const EngineSpec& e = q.engines[0];
  EXPECT_EQ(e.region, "region_0");
  EXPECT_EQ(e.backend_version, "2.6.3");
  EXPECT_EQ(e.options, "threads=1");
  EXPECT_EQ(e.inputs, std::vector<std::string>{"x"});
  EXPECT_EQ(e.outputs, std::vector<std::string>{"m"});
  ASSERT_EQ(e.constants.size(), 1u);
  EXPECT_EQ(e.constants[0].key, "w");
  EXPECT_EQ(e.constants[0].name, "W0");
}

// The end-to-end check's thread verdict (ProgramMeta::threads_best) survives the artifact, and a session asked for
// the thread count it was measured at runs on the fewer threads; asked for another count, on that.
TEST_F(ArtifactTest, ThreadVerdictRoundTripsAndSessionsAskedForThoseThreadsRunOnFewer) {
  Program p = mlp_program();
  p.engines.clear();  // the glue graph computes everything; no plugin needed
  ASSERT_TRUE(write_artifact(p, path("plain.tsr")).ok());
  p.meta.threads_measured = 2;
  p.meta.threads_best = 1;
  ASSERT_TRUE(write_artifact(p, path("one.tsr")).ok());
  auto plain = read_artifact(path("plain.tsr"));
  auto one = read_artifact(path("one.tsr"));
  ASSERT_TRUE(plain.ok() && one.ok());
  EXPECT_EQ(plain->meta.threads_best, 0);
  EXPECT_EQ(one->meta.threads_measured, 2);
  EXPECT_EQ(one->meta.threads_best, 1);
  for (int asked : {1, 2, 3}) {
    SessionOptions so;
    so.num_threads = asked;
    auto a = InferenceSession::Create(*plain, so);
    auto b = InferenceSession::Create(*one, so);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ((*a)->num_threads(), asked);
    EXPECT_EQ((*b)->num_threads(), asked == 2 ? 1 : asked) << "asked for " << asked;
    EXPECT_EQ((*a)->threads_asked(), asked);
    EXPECT_EQ((*b)->threads_asked(), asked);
  }
}

TEST_F(ArtifactTest, ConstantsAreMappedAlignedAndOutliveTheProgram) {
  ASSERT_TRUE(write_artifact(mlp_program(), path("m.tsr")).ok());
  Tensor w;
  Blob blob;
  {
    auto r = read_artifact(path("m.tsr"));
    ASSERT_TRUE(r.ok()) << r.status().message();
    for (const auto& kv : r.value().constants) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(kv.second.raw()) % 64, 0u) << kv.first;
    }
    EXPECT_EQ(r.value().graph.constants.at("w").raw(), r.value().constants.at("w").raw());
    w = r.value().constants.at("w");
    blob = r.value().engines[0].blob;
  }
  // The program is gone; the tensor and the blob still hold the mapping.
  expect_same_bytes(w, mlp_program().constants.at("w"));
  EXPECT_EQ(blob.data[999], static_cast<uint8_t>(999 * 131 + 7));
}

TEST_F(ArtifactTest, ConstantSharedByGlueGraphAndEnginesIsStoredOnce) {
  Program p = mlp_program();
  Tensor big = iota(DType::kFloat32, {256, 256}, 1.f);  // 256 KiB
  p.constants["big"] = big;
  p.constants["big_alias"] = big;  // a second key on the same storage
  p.graph.constants["big"] = big;
  p.graph.nodes.push_back(node("neg", "Neg", {"big"}, {"nb"}));
  p.engines[0].constants.push_back({"big", "B"});
  EngineSpec e2 = p.engines[0];
  e2.region = "region_1";
  e2.constants = {{"big_alias", "B"}};
  p.engines.push_back(e2);
  ASSERT_TRUE(write_artifact(p, path("m.tsr")).ok());
  EXPECT_LT(std::filesystem::file_size(path("m.tsr")), big.nbytes() + 16 * 1024);

  json meta = meta_of(path("m.tsr"));
  uint64_t big_offset = 1, alias_offset = 2;
  for (const auto& c : meta["constants"]) {
    if (c["key"] == "big") big_offset = c["offset"];
    if (c["key"] == "big_alias") alias_offset = c["offset"];
  }
  EXPECT_EQ(big_offset, alias_offset);
  for (const auto& c : meta["graph"]["constants"]) {
    if (c["name"] == "big") {
      EXPECT_EQ(c["key"], "big");
    }
  }

  auto r = read_artifact(path("m.tsr"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().graph.constants.at("big").raw(), r.value().constants.at("big").raw());
  EXPECT_EQ(r.value().constants.at("big_alias").raw(), r.value().constants.at("big").raw());
  expect_same_bytes(r.value().constants.at("big"), big);
}

TEST_F(ArtifactTest, GlueConstantMissingFromProgramConstantsIsStillStored) {
  Program p = mlp_program();
  p.constants.erase("b");
  p.constants["w"] = iota(DType::kFloat32, {4, 3}, 9.f);  // same key, other bytes than the glue graph's "w"
  ASSERT_TRUE(write_artifact(p, path("m.tsr")).ok());
  auto r = read_artifact(path("m.tsr"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_same_bytes(r.value().graph.constants.at("b"), p.graph.constants.at("b"));
  expect_same_bytes(r.value().graph.constants.at("w"), p.graph.constants.at("w"));
  expect_same_bytes(r.value().constants.at("w"), p.constants.at("w"));
}

TEST_F(ArtifactTest, EngineBlobsRoundTripByteExact) {
  Program p = mlp_program();
  std::mt19937 rng(3);
  std::vector<std::vector<uint8_t>> blobs = {{}, {42}, std::vector<uint8_t>(100000), std::vector<uint8_t>(63)};
  p.engines.clear();
  for (size_t i = 0; i < blobs.size(); ++i) {
    for (auto& b : blobs[i]) b = static_cast<uint8_t>(rng());
    EngineSpec e;
    e.region = "region_" + std::to_string(i);
    e.backend = i % 2 ? "xnnpack" : "dnnl";
    e.inputs = {"x"};
    e.outputs = {"y"};
    e.blob = Blob::Copy(blobs[i].data(), blobs[i].size());
    p.engines.push_back(e);
  }
  ASSERT_TRUE(write_artifact(p, path("m.tsr")).ok());
  auto r = read_artifact(path("m.tsr"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r.value().engines.size(), blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) {
    const Blob& b = r.value().engines[i].blob;
    EXPECT_EQ(r.value().engines[i].region, "region_" + std::to_string(i));
    ASSERT_EQ(b.size, blobs[i].size());
    EXPECT_TRUE(b.size == 0 || std::memcmp(b.data, blobs[i].data(), b.size) == 0) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 64, 0u);
  }
}

// In memory: the bytes write_artifact_bytes gives are the file's, byte for byte,
// and read_artifact_bytes gives a program that runs like the file's (its
// constants 64-byte aligned in its own copy, the caller's buffer freed).
TEST_F(ArtifactTest, BytesAreTheFileAndReadBackLikeIt) {
  Program p = mlp_program();
  ASSERT_TRUE(write_artifact(p, path("m.tsr")).ok());
  auto bytes = write_artifact_bytes(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  std::ifstream f(path("m.tsr"), std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(*bytes, file);
  auto copy = std::make_unique<std::string>("x" + *bytes);  // misaligned on purpose
  auto from_bytes = read_artifact_bytes("mem", copy->data() + 1, bytes->size());
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status().message();
  copy.reset();
  auto from_file = read_artifact(path("m.tsr"));
  ASSERT_TRUE(from_file.ok());
  for (const auto& [name, t] : from_bytes->constants) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << name;
    ASSERT_TRUE(from_file->constants.count(name));
    EXPECT_EQ(std::memcmp(t.raw(), from_file->constants.at(name).raw(), t.nbytes()), 0) << name;
  }
  EXPECT_EQ(from_bytes->graph.nodes.size(), from_file->graph.nodes.size());
  // The file reader's checks: a flipped byte and a truncation are refused, naming the buffer.
  std::string flipped = *bytes;
  flipped[flipped.size() / 2] ^= 0x5A;
  auto bad = read_artifact_bytes("mem", flipped.data(), flipped.size());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("artifact 'mem'"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(read_artifact_bytes("mem", bytes->data(), 10).ok());
}

TEST_F(ArtifactTest, GraphWithNoNodesReturnsItsInput) {
  Program p;
  p.graph.inputs = {"x"};
  p.graph.outputs = {"x"};
  p.graph.values["x"] = ValueInfo{DType::kInt64, Shape({Dim(3)})};
  ASSERT_TRUE(write_artifact(p, path("m.tsr")).ok());
  auto r = read_artifact(path("m.tsr"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r.value().graph.nodes.empty());
  EXPECT_TRUE(r.value().constants.empty());
  Tensor x = Tensor::FromVector<int64_t>({5, -6, 7}, {3});
  auto out = run_graph(r.value().graph, {x});
  ASSERT_EQ(out.size(), 1u);
  expect_same_bytes(out[0], x);
}

TEST_F(ArtifactTest, OutputThatIsAConstantAndInputThatIsAnOutputRoundTrip) {
  Program p = mlp_program();
  p.graph.outputs = {"y", "b", "x"};
  ASSERT_TRUE(write_artifact(p, path("m.tsr")).ok());
  auto r = read_artifact(path("m.tsr"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().graph.outputs, p.graph.outputs);
  EXPECT_EQ(r.value().graph.inputs, p.graph.inputs);
  Tensor x = iota(DType::kFloat32, {3, 4}, -1.f);
  auto before = run_graph(p.graph, {x});
  auto after = run_graph(r.value().graph, {x});
  ASSERT_EQ(after.size(), 3u);
  ASSERT_EQ(before.size(), 3u);
  for (size_t i = 0; i < 3; ++i) expect_same_bytes(before[i], after[i]);
  expect_same_bytes(after[1], p.constants.at("b"));
  expect_same_bytes(after[2], x);
}

TEST_F(ArtifactTest, WriterRejectsEngineThatNamesAMissingConstantOrValue) {
  Program p = mlp_program();
  p.engines[0].constants.push_back({"nope", "N"});
  Status st = write_artifact(p, path("m.tsr"));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("constant key 'nope'"), std::string::npos) << st.message();
  p = mlp_program();
  p.engines[0].outputs = {"ghost"};
  st = write_artifact(p, path("m.tsr"));
  EXPECT_NE(st.message().find("'ghost' is not in the glue graph"), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(path("m.tsr")));
}

TEST_F(ArtifactTest, DescribeListsSectionsEnginesConstantsAndSignature) {
  ASSERT_TRUE(write_artifact(mlp_program(), path("m.tsr")).ok());
  auto text = describe_artifact(path("m.tsr"), false);
  ASSERT_TRUE(text.ok()) << text.status().message();
  for (const char* s :
       {"format 1", "META", "GRAPH", "CONSTANTS", "ENGINE", "crc32c 0x", "region_0: dnnl 2.6.3", "blob 1000 bytes",
        "constants: 2", "x: float32[batch,4]", "y: float32[batch,3]", "compiled from 'mlp.onnx'"}) {
    EXPECT_NE(text.value().find(s), std::string::npos) << s << "\n" << text.value();
  }
  auto js = describe_artifact(path("m.tsr"), true);
  ASSERT_TRUE(js.ok());
  json j = json::parse(js.value());
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["file_size"], std::filesystem::file_size(path("m.tsr")));
  EXPECT_EQ(j["sections"].size(), 4u);
  EXPECT_EQ(j["engines"][0]["blob_bytes"], 1000);
  EXPECT_EQ(j["constants"]["count"], 2);
  EXPECT_EQ(j["inputs"][0]["dims"], json::parse(R"(["batch", 4])"));
}

TEST_F(ArtifactTest, BucketsRoundTripWithTheirEnginesAndConstants) {
  Program p = bucketed_program();
  ASSERT_EQ(p.buckets.size(), 1u);
  ASSERT_EQ(p.engines.size(), 2u);
  EXPECT_EQ(p.engines[1].region, "bucket1/region_0");
  ASSERT_TRUE(write_artifact(p, path("b.tsr")).ok());
  auto r = read_artifact(path("b.tsr"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Program& q = r.value();
  ASSERT_EQ(q.buckets.size(), 1u);
  EXPECT_EQ(q.buckets[0].inputs, (std::vector<Dims>{{2, 4}}));
  EXPECT_EQ(q.buckets[0].graph.info("x")->shape.str(), "[2,4]");
  ASSERT_EQ(q.engines.size(), 2u);
  EXPECT_EQ(q.engines[1].region, "bucket1/region_0");
  ASSERT_EQ(q.engines[1].constants.size(), 2u);
  EXPECT_EQ(q.engines[1].constants[0].key, "w");         // the same contents: shared
  EXPECT_EQ(q.engines[1].constants[1].key, "bucket1/b");  // other contents under a key main uses: renamed
  EXPECT_EQ(q.constants.size(), 3u);
  // Each glue graph keeps its own constants: the bucket's b is its own.
  Tensor x = iota(DType::kFloat32, {2, 4}, 1.f);
  auto main_out = run_graph(q.graph, {x});
  auto bucket_before = run_graph(p.buckets[0].graph, {x});
  auto bucket_after = run_graph(q.buckets[0].graph, {x});
  ASSERT_EQ(bucket_after.size(), 1u);
  expect_same_bytes(bucket_before[0], bucket_after[0]);
  EXPECT_NE(0, std::memcmp(main_out[0].raw(), bucket_after[0].raw(), main_out[0].nbytes()));

  auto text = describe_artifact(path("b.tsr"), false);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("buckets: 1"), std::string::npos) << *text;
  EXPECT_NE(text->find("  [2,4]: 3 nodes; engines none"), std::string::npos) << *text;
  auto j = json::parse(describe_artifact(path("b.tsr"), true).value());
  EXPECT_EQ(j["buckets"][0]["inputs"], json::parse("[[2, 4]]"));

  // A bucket whose inputs are not the program's is refused by the writer.
  Program bad = mlp_program();
  bad.buckets.push_back(ProgramBucket{{{2, 4}, {1}}, mlp_program().graph, {}});
  EXPECT_FALSE(write_artifact(bad, path("bad.tsr")).ok());
  EXPECT_FALSE(add_bucket(bad, mlp_program(), {{2, 4}, {1}}).ok());
}

// --- corruption --------------------------------------------------------------

class ArtifactCorruptionTest : public ArtifactTest {
 protected:
  void SetUp() override {
    ArtifactTest::SetUp();
    write_good(mlp_program());
  }
  // `p` as the artifact the test damages.
  void write_good(const Program& p) {
    good_ = path("good.tsr");
    ASSERT_TRUE(write_artifact(p, good_).ok());
    bytes_ = read_bytes(good_);
  }
  // Each variant goes to a fresh file: truncating or renaming over an
  // existing file makes ext4 flush it to disk, which costs milliseconds.
  Status read(const std::string& bytes) {
    last_ = path("bad_" + std::to_string(count_++) + ".tsr");
    write_bytes(last_, bytes);
    Status st = read_artifact(last_).status();
    std::filesystem::remove(last_);
    return st;
  }
  Status read_file(const std::string& p) { return read_artifact(p).status(); }
  // Rewrites META through `edit` (checksums valid) and reads the result.
  template <class Edit>
  Status read_with_meta(Edit&& edit) {
    json meta = meta_of(good_);
    edit(meta);
    const std::string p = path("meta_" + std::to_string(count_++) + ".tsr");
    replace_section(good_, p, fmt::SectionKind::kMeta, meta.dump());
    return read_file(p);
  }
  std::string good_, bytes_, last_;
  int count_ = 0;
};

#define EXPECT_REJECTED(st, text)                                            \
  do {                                                                       \
    Status _st = (st);                                                       \
    EXPECT_FALSE(_st.ok());                                                  \
    EXPECT_EQ(_st.exit_code(), 2) << _st.message();                          \
    EXPECT_NE(_st.message().find(text), std::string::npos) << _st.message(); \
  } while (0)

TEST_F(ArtifactCorruptionTest, TruncationAtEverySectionBoundaryIsRejected) {
  std::vector<uint64_t> cuts = {0, 1, 8, fmt::kHeaderSize - 1, fmt::kHeaderSize};
  for (const Entry& e : table_of(bytes_)) {
    cuts.push_back(e.offset);
    cuts.push_back(e.offset + e.size / 2);
    if (e.offset + e.size < bytes_.size()) cuts.push_back(e.offset + e.size);
    if (e.offset + e.size > 0) cuts.push_back(e.offset + e.size - 1);
  }
  for (uint64_t n : cuts) {
    ASSERT_LT(n, bytes_.size());
    Status st = read(bytes_.substr(0, n));
    EXPECT_FALSE(st.ok()) << "truncated to " << n;
    EXPECT_EQ(st.exit_code(), 2) << st.message();
  }
  EXPECT_REJECTED(read(bytes_ + std::string(1, '\0')), "truncated or appended to");
}

TEST_F(ArtifactCorruptionTest, TruncationAtRandomLengthsIsRejected) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    size_t n = rng() % bytes_.size();
    Status st = read(bytes_.substr(0, n));
    EXPECT_FALSE(st.ok()) << "truncated to " << n;
    EXPECT_EQ(st.exit_code(), 2) << st.message();
  }
}

TEST_F(ArtifactCorruptionTest, EveryRandomByteFlipIsDetected) {
  // Every byte is under a checksum or must be zero, so no flip may pass.
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 2500; ++i) {
    std::string f = bytes_;
    size_t at = rng() % f.size();
    f[at] = static_cast<char>(f[at] ^ static_cast<char>(1 + rng() % 255));
    Status st = read(f);
    EXPECT_FALSE(st.ok()) << "flip at " << at;
    EXPECT_EQ(st.exit_code(), 2) << st.message();
  }
}

TEST_F(ArtifactCorruptionTest, EditsBehindValidChecksumsNeverCrashAndErrorsAreNamed) {
  // Flips inside META and GRAPH with the checksums recomputed reach the JSON
  // and ONNX decoding: each must give a named error (or, for a harmless edit
  // such as a changed producer string, a Program), never a crash; this runs
  // under the sanitizers too.
  std::mt19937_64 rng(99);
  const auto table = table_of(bytes_);
  int rejected = 0;
  for (int i = 0; i < 600; ++i) {
    const Entry& e = table[static_cast<size_t>(i % 2)];  // META, GRAPH
    std::string f = bytes_;
    for (int k = 0; k < 1 + i % 3; ++k) {
      size_t at = e.offset + rng() % e.size;
      f[at] = static_cast<char>(f[at] ^ static_cast<char>(1 + rng() % 255));
    }
    fix_checksums(f);
    Status st = read(f);
    if (!st.ok()) {
      ++rejected;
      EXPECT_EQ(st.exit_code(), 2) << st.message();
      EXPECT_EQ(st.message().rfind("artifact '", 0), 0u) << st.message();
    }
  }
  EXPECT_GT(rejected, 300);
}

TEST_F(ArtifactCorruptionTest, WrongMagicIsNotAnArtifact) {
  std::string f = bytes_;
  f[1] = 'X';
  EXPECT_REJECTED(read(f), "bad magic");
  write_bytes(path("bad.tsr"), f);
  EXPECT_FALSE(is_artifact_file(path("bad.tsr")));
  write_bytes(path("short"), "\x89TS");
  EXPECT_FALSE(is_artifact_file(path("short")));
  EXPECT_FALSE(is_artifact_file(path("missing")));
}

TEST_F(ArtifactCorruptionTest, UnknownFormatVersionIsNamed) {
  std::string f = bytes_;
  fmt::put_u32(reinterpret_cast<uint8_t*>(f.data()) + fmt::kOffVersion, 4);
  fix_checksums(f);
  Status st = read(f);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(st.message(), "artifact '" + last_ + "': format version 4 is not supported (this build reads 1-3)");
}

TEST_F(ArtifactCorruptionTest, SectionOffsetPastTheEndIsRejected) {
  std::string f = bytes_;
  auto* e = reinterpret_cast<uint8_t*>(f.data()) + fmt::kHeaderSize + 3 * fmt::kEntrySize;
  fmt::put_u64(e + fmt::kEntOffset, (f.size() + 64) / 64 * 64);
  fix_checksums(f);
  EXPECT_REJECTED(read(f), "past the end of the file");
}

TEST_F(ArtifactCorruptionTest, SectionSizeThatWrapsAroundIsRejected) {
  std::string f = bytes_;
  auto* e = reinterpret_cast<uint8_t*>(f.data()) + fmt::kHeaderSize + 3 * fmt::kEntrySize;
  uint64_t offset = fmt::get_u64(e + fmt::kEntOffset);
  fmt::put_u64(e + fmt::kEntSize, UINT64_MAX - offset + 65);  // offset + size wraps to 64
  fix_checksums(f);
  EXPECT_REJECTED(read(f), "runs past the end");
}

TEST_F(ArtifactCorruptionTest, OverlappingOrMisalignedSectionsAreRejected) {
  auto entry = [](std::string& f, size_t i) {
    return reinterpret_cast<uint8_t*>(f.data()) + fmt::kHeaderSize + i * fmt::kEntrySize;
  };
  std::string f = bytes_;
  fmt::put_u64(entry(f, 1) + fmt::kEntOffset, table_of(bytes_)[1].offset - 64);  // GRAPH into META
  fix_checksums(f);
  EXPECT_REJECTED(read(f), "overlaps");
  f = bytes_;
  fmt::put_u64(entry(f, 0) + fmt::kEntOffset, table_of(bytes_)[0].offset + 8);
  fix_checksums(f);
  EXPECT_REJECTED(read(f), "not 64-byte aligned");
}

TEST_F(ArtifactCorruptionTest, MalformedMetaIsRejectedWithTheField) {
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["dtype"] = 5; }), "'constants[0].dtype'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["dtype"] = "string"; }), "unsupported dtype");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["dims"] = json::parse("[-1, 3]"); }),
                  "'constants[0].dims[0]'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["dims"] = json::parse("[4611686018427387904, 4]"); }),
                  "overflows 64 bits");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["size"] = 8; }), "does not match");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["offset"] = 1u << 20; }), "outside the CONSTANTS");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["offset"] = UINT64_MAX - 63; }),
                  "outside the CONSTANTS");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][0]["offset"] = 4; }), "not 64-byte aligned");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["constants"][1]["key"] = m["constants"][0]["key"]; }),
                  "appears twice");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"][0]["section"] = 1; }), "not an ENGINE section");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"][0]["section"] = 99; }), "not an ENGINE section");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"][0]["section"] = -3; }), "'engines[0].section'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"][0]["region"] = 7; }), "'engines[0].region'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"][0]["inputs"] = json::parse(R"(["nope"])"); }),
                  "'nope' is not in the glue graph");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"][0]["constants"][0]["key"] = "zz"; }), "'zz'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"].push_back(m["engines"][0]); }), "two engines");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["engines"] = json::array(); }), "belongs to no engine");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["outputs"][0]["name"] = "zzz"; }), "'zzz'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["inputs"][0]["dims"] = json::parse("[1, 4]"); }), "does not match");
  EXPECT_REJECTED(read_with_meta([](json& m) { m.erase("graph"); }), "'graph'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["graph"]["num_inputs"] = 5; }), "META expects");
  EXPECT_REJECTED(read_with_meta([](json& m) {
                    m["graph"]["constants"][0]["key"] = "w";
                    m["graph"]["constants"][1]["key"] = "b";
                  }),
                  "declared");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["backends"] = "dnnl"; }), "'backends'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["threads"] = json::parse(R"({"measured": 2, "best": 2})"); }),
                  "not a thread count below");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["threads"] = json::parse(R"({"measured": 2})"); }), "'threads.best'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["threads"] = 1; }), "'threads'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m = json::array(); }), "not a JSON object");
}

class ArtifactBucketCorruptionTest : public ArtifactCorruptionTest {
 protected:
  void SetUp() override {
    ArtifactTest::SetUp();
    write_good(bucketed_program());
  }
};

TEST_F(ArtifactBucketCorruptionTest, DamagedBucketsAreRejectedNamingWhat) {
  ASSERT_TRUE(read_file(good_).ok());
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["section"] = 1; }), "not a BUCKET section");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"].push_back(m["buckets"][0]); }), "two buckets");
  EXPECT_REJECTED(read_with_meta([](json& m) { m.erase("buckets"); }), "belongs to no bucket");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["inputs"] = json::parse("[[2]]"); }),
                  "does not fit input 'x'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["inputs"] = json::parse("[[-1, 4]]"); }),
                  "'buckets[0].inputs[0]'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["inputs"] = json::parse("[[4611686018427387904, 4]]"); }),
                  "'buckets[0].inputs[0]'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["graph"]["constants"][0]["key"] = "zz"; }), "'zz'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["graph"]["num_inputs"] = 7; }), "BUCKET");
  replace_section(good_, path("g.tsr"), fmt::SectionKind::kBucket, std::string(100, '\xff'));
  EXPECT_REJECTED(read_file(path("g.tsr")), "BUCKET");
  // A flipped byte in the bucket's section: its checksum names it.
  const auto table = table_of(bytes_);
  ASSERT_EQ(table.back().kind, static_cast<uint32_t>(fmt::SectionKind::kBucket));
  std::string flipped = bytes_;
  flipped[table.back().offset + table.back().size / 2] ^= 0x10;
  EXPECT_REJECTED(read(flipped), "BUCKET");
  // Format 2 is written only with buckets (a program without them stays format 1, for older readers), and a BUCKET
  // section in a format-1 file is not one.
  EXPECT_EQ(fmt::get_u32(reinterpret_cast<const uint8_t*>(bytes_.data()) + fmt::kOffVersion), 2u);
  std::string one = bytes_;
  fmt::put_u32(reinterpret_cast<uint8_t*>(one.data()) + fmt::kOffVersion, 1);
  fix_checksums(one);
  EXPECT_REJECTED(read(one), "unknown section kind 5 in format 1");
  // A masked bucket's range needs format 3: in a format-2 file it is refused, not ignored.
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["lower"] = json::parse("[[1, 4]]"); }),
                  "a masked bucket in a format 2 artifact");
}

// A masked bucket (ProgramBucket::lower: every dims from lower to its inputs) round-trips in a format-3 file, which
// inspect shows as a range; a range that is not per input, or goes above the bucket's own dims, is refused.
class ArtifactMaskedBucketTest : public ArtifactCorruptionTest {
 protected:
  void SetUp() override {
    ArtifactTest::SetUp();
    Program p = bucketed_program();
    p.buckets[0].lower = {{1, 4}};
    write_good(p);
  }
};

TEST_F(ArtifactMaskedBucketTest, RangesRoundTripInFormatThreeAndBadOnesAreRejected) {
  EXPECT_EQ(fmt::get_u32(reinterpret_cast<const uint8_t*>(bytes_.data()) + fmt::kOffVersion), 3u);
  auto r = read_artifact(good_);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->buckets.size(), 1u);
  EXPECT_EQ(r->buckets[0].inputs, (std::vector<Dims>{{2, 4}}));
  EXPECT_EQ(r->buckets[0].lower, (std::vector<Dims>{{1, 4}}));
  auto text = describe_artifact(good_, false);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("; 1 masked"), std::string::npos) << *text;
  EXPECT_NE(text->find("  [1..2,4]: 3 nodes"), std::string::npos) << *text;
  auto j = json::parse(describe_artifact(good_, true).value());
  EXPECT_EQ(j["buckets"][0]["lower"], json::parse("[[1, 4]]"));
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["lower"] = json::parse("[[3, 4]]"); }),
                  "'buckets[0].lower'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["lower"] = json::parse("[[1]]"); }),
                  "'buckets[0].lower'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["lower"] = json::parse("[[1, 4], [1, 4]]"); }),
                  "'buckets[0].lower'");
  EXPECT_REJECTED(read_with_meta([](json& m) { m["buckets"][0]["lower"] = 5; }), "'buckets[0].lower'");
}

TEST_F(ArtifactCorruptionTest, UnparseableSectionsWithValidChecksumsAreRejected) {
  replace_section(good_, path("a.tsr"), fmt::SectionKind::kMeta, "{\"producer\": \"tessera\", ");
  EXPECT_REJECTED(read_file(path("a.tsr")), "not valid JSON");
  replace_section(good_, path("b.tsr"), fmt::SectionKind::kGraph, std::string(100, '\xff'));
  EXPECT_REJECTED(read_file(path("b.tsr")), "GRAPH");
  replace_section(good_, path("c.tsr"), fmt::SectionKind::kConstants, std::string(64, '\0'));
  EXPECT_REJECTED(read_file(path("c.tsr")), "outside the CONSTANTS");
}

TEST_F(ArtifactCorruptionTest, MissingFileIsAnIoError) {
  Status st = read_file(path("missing.tsr"));
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find("cannot open"), std::string::npos);
  EXPECT_FALSE(describe_artifact(path("missing.tsr"), false).ok());
}

}  // namespace
}  // namespace tessera
