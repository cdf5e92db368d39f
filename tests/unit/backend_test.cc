// The host side of the backend ABI: table validation, plugin discovery, the
// backend list, and refusing engines from another version of a plugin.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "backends/native/native_backend.h"
#include "backends/backend.h"
#include "runtime/session.h"

namespace tessera {
namespace {

std::string examples_dir() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / ".." / "examples").lexically_normal();
}

TEST(Backend, native_table_is_valid_and_named) {
  auto b = Backend::FromTable(native_backend_table(), "", nullptr);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ((*b)->name(), "native");
  // The release, then which build of it (the binary's GNU build id).
  EXPECT_EQ((*b)->version().rfind(TESSERA_VERSION, 0), 0u) << (*b)->version();
  EXPECT_EQ((*b)->version().size(), std::string(TESSERA_VERSION).size() + 13) << (*b)->version();
}

TEST(Backend, table_from_another_abi_version_is_refused_by_name) {
  tessera_backend_t t = *native_backend_table();
  t.abi_version = TESSERA_BACKEND_ABI_VERSION + 1;
  auto b = Backend::FromTable(&t, "/x/libtessera_backend_future.so", nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("ABI version 2"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("libtessera_backend_future.so"), std::string::npos);
  EXPECT_EQ(b.status().exit_code(), 2);
}

TEST(Backend, truncated_table_and_missing_functions_are_refused) {
  tessera_backend_t t = *native_backend_table();
  t.struct_size = 16;
  EXPECT_FALSE(Backend::FromTable(&t, "", nullptr).ok());
  t = *native_backend_table();
  t.run = nullptr;
  auto b = Backend::FromTable(&t, "", nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("required function"), std::string::npos);
  EXPECT_FALSE(Backend::FromTable(nullptr, "p.so", nullptr).ok());
}

TEST(Backend, a_table_of_minor_revision_0_still_loads_and_declares_nothing) {
  // What a plugin built against the 1.0 header hands over: a table that ends
  // at estimate_cost, followed by memory that is not its own.
  struct Old {
    tessera_backend_t t;
  } old{*native_backend_table()};
  old.t.struct_size = static_cast<uint32_t>(TESSERA_BACKEND_V1_0_SIZE);
  old.t.threading = 0xdeadbeef;  // beyond struct_size: must not be read
  old.t.color = "#not-read";
  auto b = Backend::FromTable(&old.t, "", nullptr);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ((*b)->threading(), Threading::kUnknown);
  EXPECT_EQ((*b)->color(), "");
  EXPECT_FALSE((*b)->gives_profile());
  // One byte short of 1.0 is refused.
  old.t.struct_size = static_cast<uint32_t>(TESSERA_BACKEND_V1_0_SIZE - 1);
  EXPECT_FALSE(Backend::FromTable(&old.t, "", nullptr).ok());
}

TEST(Backend, a_table_of_minor_revision_1_declares_its_threading_and_colour) {
  auto b = Backend::FromTable(native_backend_table(), "", nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->threading(), Threading::kPool);
  EXPECT_EQ((*b)->color(), "#d9d9d9");
  tessera_backend_t t = *native_backend_table();
  t.threading = 77;  // not a known value: unknown
  auto odd = Backend::FromTable(&t, "", nullptr);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ((*odd)->threading(), Threading::kUnknown);
  EXPECT_EQ(threading_from_name(threading_name(Threading::kOpenMP)), Threading::kOpenMP);
  EXPECT_EQ(threading_from_name("fibers"), Threading::kUnknown);
}

TEST(Backend, library_without_the_query_symbol_is_refused) {
  auto b = Backend::LoadLibrary("libz.so.1");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("tessera_backend_query"), std::string::npos) << b.status().message();
  auto missing = Backend::LoadLibrary("/nonexistent/libtessera_backend_x.so");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().exit_code(), 2);
}

TEST(Backend, backend_list_puts_native_last_and_names_unknown_backends) {
  auto only = resolve_backends("native");
  ASSERT_TRUE(only.ok());
  ASSERT_EQ(only->size(), 1u);
  EXPECT_TRUE((*only)[0]->is_native());
  EXPECT_FALSE(resolve_backends("native,example").ok());
  EXPECT_FALSE(resolve_backends("native,native").ok());
  EXPECT_FALSE(resolve_backends("a,,b").ok());
  auto unknown = resolve_backends("nosuchengine");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("nosuchengine"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("TESSERA_BACKEND_PATH"), std::string::npos);
  EXPECT_EQ(unknown.status().exit_code(), 2);
  EXPECT_FALSE(resolve_backends("../evil").ok());
}

TEST(Backend, plugin_is_found_on_the_search_path_and_native_appended) {
  setenv("TESSERA_BACKEND_PATH", ("/nonexistent:" + examples_dir()).c_str(), 1);
  auto list = resolve_backends("example");
  unsetenv("TESSERA_BACKEND_PATH");
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0]->name(), "example");
  EXPECT_NE((*list)[0]->path().find("libtessera_backend_example.so"), std::string::npos);
  EXPECT_TRUE((*list)[1]->is_native());
}

TEST(Backend, default_list_is_every_plugin_found_then_native) {
  setenv("TESSERA_BACKEND_PATH", examples_dir().c_str(), 1);
  auto names = available_backends();
  unsetenv("TESSERA_BACKEND_PATH");
  ASSERT_GE(names.size(), 2u);
  EXPECT_NE(std::find(names.begin(), names.end(), "example"), names.end());
  EXPECT_EQ(names.back(), "native");
}

TEST(Backend, engine_from_another_backend_version_is_refused_at_load) {
  Program p;
  p.graph.name = "g";
  p.graph.inputs = {"x"};
  p.graph.outputs = {"x"};
  p.graph.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  EngineSpec e;
  e.region = "region 0 (native)";
  e.backend = "native";
  e.backend_version = "0.0-other";
  p.engines.push_back(e);
  auto s = InferenceSession::Create(std::move(p));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("version '0.0-other'"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("recompile"), std::string::npos);
}

TEST(Backend, engine_of_a_missing_plugin_is_a_named_error) {
  Program p;
  p.graph.inputs = {"x"};
  p.graph.outputs = {"x"};
  p.graph.values["x"] = ValueInfo{DType::kFloat32, Shape::FromDims({2})};
  EngineSpec e;
  e.region = "region 4 (tpu)";
  e.backend = "tpu";
  p.engines.push_back(e);
  auto s = InferenceSession::Create(std::move(p));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("region 4 (tpu) needs backend 'tpu'"), std::string::npos)
      << s.status().message();
  EXPECT_EQ(s.status().exit_code(), 2);
}

}  // namespace
}  // namespace tessera
