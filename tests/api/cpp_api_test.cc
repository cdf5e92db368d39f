// The C++ wrapper (include/tessera/tessera.hpp): RAII handles, exceptions
// carrying the C codes, and the same answers as ONNX Runtime.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/api_test_util.h"
#include "tessera/tessera.hpp"

namespace {

using apitest::model_path;
using apitest::reference;

TEST(CppApi, RunsAModelAndMatchesOnnxRuntime) {
  tessera::Env env;
  tessera::SessionOptions opts;
  opts.Tune(TESSERA_TUNE_OFF).TuneCache("").Threads(2);
  tessera::Session session(env, model_path("mlp"), &opts);
  const auto inputs = session.Inputs();
  ASSERT_EQ(inputs.size(), 1u);
  EXPECT_EQ(inputs[0].name, "input");
  EXPECT_EQ(inputs[0].dims, (std::vector<int64_t>{1, 256}));
  apitest::RefTensor x = reference("mlp", "input_0.pb");
  std::vector<float> data(x.floats(), x.floats() + x.count());
  tessera::Value input = tessera::Value::Wrap(data.data(), x.dims);
  std::vector<tessera::Value> out = session.Run({{"input", &input}});
  ASSERT_EQ(out.size(), 1u);
  const apitest::RefTensor want = reference("mlp", "output_0.pb");
  EXPECT_EQ(out[0].Dims(), want.dims);
  EXPECT_LE(apitest::worst_ratio(out[0].Data<float>(), want.floats(), want.count()), 1.0);
  // Into a caller value, by name.
  tessera::Value y = tessera::Value::Create(TESSERA_DTYPE_FLOAT32, want.dims);
  session.RunInto({{"input", &input}}, {{"output", &y}});
  EXPECT_LE(apitest::worst_ratio(y.Data<float>(), want.floats(), want.count()), 1.0);
}

TEST(CppApi, ErrorsAreExceptionsWithTheirCode) {
  tessera::Env env;
  try {
    tessera::Session session(env, "/nonexistent/model.onnx");
    FAIL() << "no exception";
  } catch (const tessera::Error& e) {
    EXPECT_EQ(e.code(), TESSERA_CODE_IO);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.onnx"), std::string::npos);
  }
  tessera::SessionOptions opts;
  opts.Backends("native").Tune(TESSERA_TUNE_OFF);
  tessera::Session session(env, model_path("mlp"), &opts);
  std::vector<float> wrong(10);
  tessera::Value v = tessera::Value::Wrap(wrong.data(), {1, 10});
  try {
    session.Run({{"input", &v}});
    FAIL() << "no exception";
  } catch (const tessera::Error& e) {
    EXPECT_EQ(e.code(), TESSERA_CODE_INVALID_ARGUMENT);
  }
  // A cancelled run throws CANCELLED.
  tessera::RunOptions ro;
  ro.Cancel();
  std::vector<float> x(256);
  tessera::Value good = tessera::Value::Wrap(x.data(), {1, 256});
  try {
    session.Run({{"input", &good}}, {}, &ro);
    FAIL() << "no exception";
  } catch (const tessera::Error& e) {
    EXPECT_EQ(e.code(), TESSERA_CODE_CANCELLED);
  }
  ro.Reset();
  EXPECT_EQ(session.Run({{"input", &good}}, {}, &ro).size(), 1u);
}

}  // namespace
