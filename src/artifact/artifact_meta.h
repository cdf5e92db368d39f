// META section helpers shared by the artifact writer, reader and inspector:
// the JSON spelling of dtypes and value signatures, and type-checked field
// access that turns every missing or mistyped field into a named error
// instead of an exception.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "artifact/program.h"
#include "ir/graph.h"
#include "util/status.h"

namespace tessera::artifact {

// Insertion-ordered, so META reads top-down in the order the spec lists it.
using json = nlohmann::ordered_json;

// {"name", "dtype": "float32", "dims": [1, "batch", -1] or null if unranked}.
json signature_json(const std::string& name, const ValueInfo& vi);
// "float32[batch,3]" for text output.
std::string signature_str(const ValueInfo& vi);
bool dtype_from_name(const std::string& s, DType* out);
bool same_value_info(const ValueInfo& a, const ValueInfo& b);

// Adds producer, producer_version, source_model, backends and
// shape_overrides, in that order: what META stores and what inspect shows.
void add_program_meta(const ProgramMeta& m, json* j);

// Type-checked reads of META fields. Every failure is
// "artifact 'path': META: field 'engines[0].section' is missing or not ...".
class MetaReader {
 public:
  explicit MetaReader(std::string path) : path_(std::move(path)) {}

  Status fail(const std::string& what) const;
  Status bad(const std::string& field, const char* expected) const;

  // `at` is the field path so far, "" or "engines[2]."; returns nullptr if the
  // member is missing or `obj` is not an object.
  static const json* member(const json& obj, const char* key);

  Status string(const json& obj, const char* key, const std::string& at, std::string* out) const;
  Status uint(const json& obj, const char* key, const std::string& at, uint64_t* out) const;
  Status int64(const json& obj, const char* key, const std::string& at, int64_t* out) const;
  Status array(const json& obj, const char* key, const std::string& at, const json** out) const;
  Status object(const json& obj, const char* key, const std::string& at, const json** out) const;
  Status string_list(const json& obj, const char* key, const std::string& at, std::vector<std::string>* out) const;
  // Non-negative dims whose element count fits in int64; *numel gets it.
  Status concrete_dims(const json& obj, const char* key, const std::string& at, Dims* out, int64_t* numel) const;
  Status signature(const json& item, const std::string& at, std::string* name, ValueInfo* vi) const;

 private:
  std::string path_;
};

}  // namespace tessera::artifact
