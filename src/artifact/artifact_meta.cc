#include "artifact/artifact_meta.h"

#include <limits>

#include "artifact/artifact_format.h"

namespace tessera::artifact {

namespace {

constexpr DType kDTypes[] = {DType::kFloat32, DType::kUInt8,  DType::kInt8,     DType::kUInt16,   DType::kInt16,
                             DType::kInt32,   DType::kInt64,  DType::kBool,     DType::kFloat16,  DType::kFloat64,
                             DType::kUInt32,  DType::kUInt64, DType::kBFloat16, DType::kUndefined};

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

}  // namespace

void add_program_meta(const ProgramMeta& m, json* j) {
  (*j)["producer"] = m.producer;
  (*j)["producer_version"] = m.producer_version;
  (*j)["source_model"] = m.source_model;
  json backends = json::array();
  for (const BackendRecord& b : m.backends) {
    json r = json::object();
    r["name"] = b.name;
    r["version"] = b.version;
    r["options"] = b.options;
    if (!b.threading.empty()) r["threading"] = b.threading;
    backends.push_back(std::move(r));
  }
  (*j)["backends"] = std::move(backends);
  (*j)["shape_overrides"] = m.shape_overrides;
  if (m.threads_best > 0) {
    json t = json::object();
    t["measured"] = m.threads_measured;
    t["best"] = m.threads_best;
    (*j)["threads"] = std::move(t);
  }
}

json signature_json(const std::string& name, const ValueInfo& vi) {
  json j = json::object();
  j["name"] = name;
  j["dtype"] = dtype_name(vi.dtype);
  if (!vi.shape.rank_known) {
    j["dims"] = nullptr;
  } else {
    json dims = json::array();
    for (const Dim& d : vi.shape.dims) {
      if (d.known())
        dims.push_back(d.value);
      else if (!d.symbol.empty())
        dims.push_back(d.symbol);
      else
        dims.push_back(-1);
    }
    j["dims"] = std::move(dims);
  }
  return j;
}

std::string signature_str(const ValueInfo& vi) { return std::string(dtype_name(vi.dtype)) + vi.shape.str(); }

bool dtype_from_name(const std::string& s, DType* out) {
  for (DType t : kDTypes) {
    if (s == dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

bool same_value_info(const ValueInfo& a, const ValueInfo& b) {
  if (a.dtype != b.dtype || a.shape.rank_known != b.shape.rank_known || a.shape.rank() != b.shape.rank()) return false;
  for (int i = 0; i < a.shape.rank(); ++i) {
    if (a.shape[i].value != b.shape[i].value || a.shape[i].symbol != b.shape[i].symbol) return false;
  }
  return true;
}

Status MetaReader::fail(const std::string& what) const { return corrupt(path_, "META", what); }

Status MetaReader::bad(const std::string& field, const char* expected) const {
  return fail("field '" + field + "' is missing or not " + expected);
}

const json* MetaReader::member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Status MetaReader::string(const json& obj, const char* key, const std::string& at, std::string* out) const {
  const json* v = member(obj, key);
  if (!v || !v->is_string()) return bad(at + key, "a string");
  *out = v->get_ref<const std::string&>();
  return Status::Ok();
}

Status MetaReader::uint(const json& obj, const char* key, const std::string& at, uint64_t* out) const {
  const json* v = member(obj, key);
  if (!v || !v->is_number_unsigned()) return bad(at + key, "a non-negative integer");
  *out = v->get<uint64_t>();
  return Status::Ok();
}

Status MetaReader::int64(const json& obj, const char* key, const std::string& at, int64_t* out) const {
  const json* v = member(obj, key);
  if (!v || !v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > kInt64Max)) {
    return bad(at + key, "a 64-bit integer");
  }
  *out = v->get<int64_t>();
  return Status::Ok();
}

Status MetaReader::array(const json& obj, const char* key, const std::string& at, const json** out) const {
  const json* v = member(obj, key);
  if (!v || !v->is_array()) return bad(at + key, "an array");
  *out = v;
  return Status::Ok();
}

Status MetaReader::object(const json& obj, const char* key, const std::string& at, const json** out) const {
  const json* v = member(obj, key);
  if (!v || !v->is_object()) return bad(at + key, "an object");
  *out = v;
  return Status::Ok();
}

Status MetaReader::string_list(const json& obj, const char* key, const std::string& at,
                               std::vector<std::string>* out) const {
  const json* arr = nullptr;
  TSR_RETURN_IF_ERROR(array(obj, key, at, &arr));
  out->clear();
  for (size_t i = 0; i < arr->size(); ++i) {
    const json& v = (*arr)[i];
    if (!v.is_string()) return bad(at + key + "[" + std::to_string(i) + "]", "a string");
    out->push_back(v.get_ref<const std::string&>());
  }
  return Status::Ok();
}

Status MetaReader::concrete_dims(const json& obj, const char* key, const std::string& at, Dims* out,
                                 int64_t* numel) const {
  const json* arr = nullptr;
  TSR_RETURN_IF_ERROR(array(obj, key, at, &arr));
  out->clear();
  int64_t n = 1;
  for (size_t i = 0; i < arr->size(); ++i) {
    const json& v = (*arr)[i];
    if (!v.is_number_unsigned() || v.get<uint64_t>() > kInt64Max) {
      return bad(at + key + "[" + std::to_string(i) + "]", "a non-negative integer");
    }
    int64_t d = v.get<int64_t>();
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return fail("field '" + at + key + "': the element count overflows 64 bits");
    }
    n *= d;
    out->push_back(d);
  }
  *numel = n;
  return Status::Ok();
}

Status MetaReader::signature(const json& item, const std::string& at, std::string* name, ValueInfo* vi) const {
  TSR_RETURN_IF_ERROR(string(item, "name", at, name));
  std::string dt;
  TSR_RETURN_IF_ERROR(string(item, "dtype", at, &dt));
  if (!dtype_from_name(dt, &vi->dtype)) return fail("field '" + at + "dtype': unknown dtype '" + dt + "'");
  const json* dims = member(item, "dims");
  if (!dims || !(dims->is_null() || dims->is_array())) return bad(at + "dims", "an array or null");
  vi->shape = Shape();
  if (dims->is_null()) return Status::Ok();
  std::vector<Dim> ds;
  for (size_t i = 0; i < dims->size(); ++i) {
    const json& d = (*dims)[i];
    if (d.is_string()) {
      ds.push_back(Dim::Symbol(d.get_ref<const std::string&>()));
    } else if (d.is_number_unsigned() && d.get<uint64_t>() <= kInt64Max) {
      ds.emplace_back(d.get<int64_t>());
    } else if (d.is_number_integer() && d.get<int64_t>() == -1) {
      ds.emplace_back();
    } else {
      return bad(at + "dims[" + std::to_string(i) + "]", "a size, a symbol or -1");
    }
  }
  vi->shape = Shape(std::move(ds));
  return Status::Ok();
}

}  // namespace tessera::artifact
