// Running a graph in an InferenceSession from a unit test, optimised or as it is.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "ir/graph.h"
#include "runtime/session.h"

namespace tessera::testutil {

// The outputs of `g` on `inputs` (empty, with a test failure, when the session cannot be made or run).
inline std::vector<Tensor> run_session(const Graph& g, const std::vector<Tensor>& inputs, bool optimize) {
  SessionOptions so;
  so.optimize = optimize;
  auto s = InferenceSession::Create(g, so);
  EXPECT_TRUE(s.ok()) << s.status().message();
  if (!s.ok()) return {};
  auto out = (*s)->run(inputs);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : std::vector<Tensor>{};
}

}  // namespace tessera::testutil
