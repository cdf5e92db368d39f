// The blob: what compile hands the host and load gets back. Input: a Program
// (serialize) or untrusted bytes (deserialize). Output: bytes, or a validated
// Program. Method: magic "TSRXNNPK", a u32 format version, then every list of
// the program as a u32 count followed by its records, little-endian, through
// the bounds-checked BlobWriter/BlobReader. Lists grow record by record, so a
// count that lies fails at "truncated" before it allocates much; the decoded
// program then goes through validate() before load uses a single index.
#include <cstring>

#include "program.h"

namespace tessera_xnn {

using tessera_plugin::BlobReader;
using tessera_plugin::BlobWriter;
using tessera_plugin::fail;

namespace {

constexpr uint32_t kMaxCount = 1u << 20;   // records per list
constexpr uint32_t kMaxParams = 1u << 16;  // ints/floats per record

void put_dims(BlobWriter& w, const Dims& d) {
  w.u32(static_cast<uint32_t>(d.size()));
  for (int64_t x : d) w.i64(x);
}

void put_type(BlobWriter& w, const std::string& name, const ValueType& t) {
  w.str(name);
  w.i32(t.dtype);
  put_dims(w, t.dims);
}

template <class T, class Put>
void put_list(BlobWriter& w, const std::vector<T>& v, Put put) {
  w.u32(static_cast<uint32_t>(v.size()));
  for (const T& x : v) put(x);
}

class Reader {
 public:
  Reader(const void* data, size_t size) : r_(data, size) {}
  uint32_t count(uint32_t max, const char* what) {
    uint32_t n = r_.u32();
    if (n > max) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, std::string("blob: too many ") + what);
    return n;
  }
  Dims dims() {
    Dims d;
    uint32_t n = count(8, "dims");
    for (uint32_t i = 0; i < n; ++i) d.push_back(r_.i64());
    return d;
  }
  template <class E>
  E enum_value(E limit, const char* what) {
    uint32_t v = r_.u32();
    if (v >= static_cast<uint32_t>(limit)) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, std::string("blob: bad ") + what);
    return static_cast<E>(v);
  }
  std::vector<int64_t> ints() {
    std::vector<int64_t> v;
    uint32_t n = count(kMaxParams, "parameters");
    for (uint32_t i = 0; i < n; ++i) v.push_back(r_.i64());
    return v;
  }
  std::vector<float> floats() {
    std::vector<float> v;
    uint32_t n = count(kMaxParams, "parameters");
    for (uint32_t i = 0; i < n; ++i) v.push_back(r_.f32());
    return v;
  }
  BlobReader& raw() { return r_; }

 private:
  BlobReader r_;
};

}  // namespace

std::string serialize(const Program& p) {
  BlobWriter w;
  w.bytes(kBlobMagic, sizeof(kBlobMagic));
  w.u32(kBlobVersion);
  w.u32(static_cast<uint32_t>(p.inputs.size()));
  for (size_t i = 0; i < p.inputs.size(); ++i) put_type(w, p.input_names[i], p.inputs[i]);
  w.u32(static_cast<uint32_t>(p.outputs.size()));
  for (size_t i = 0; i < p.outputs.size(); ++i) put_type(w, p.output_names[i], p.outputs[i]);
  put_list(w, p.tensors, [&](const TensorDef& t) {
    w.u32(static_cast<uint32_t>(t.kind));
    w.i32(t.ref);
    put_dims(w, t.dims);
    w.u32(static_cast<uint32_t>(t.dtype));
    w.i32(t.zero_point);
    put_list(w, t.scales, [&](float v) { w.f32(v); });
    w.i32(t.channel_dim);
  });
  put_list(w, p.constants, [&](const ConstantDef& c) {
    w.u32(static_cast<uint32_t>(c.transform));
    w.u32(static_cast<uint32_t>(c.sources.size()));
    for (size_t i = 0; i < c.sources.size(); ++i) {
      w.str(c.sources[i]);
      put_dims(w, c.source_dims[i]);
      w.i32(c.source_dtypes[i]);
    }
    put_list(w, c.ints, [&](int64_t v) { w.i64(v); });
    put_list(w, c.floats, [&](float v) { w.f32(v); });
  });
  put_list(w, p.nodes, [&](const NodeDef& n) {
    w.u32(static_cast<uint32_t>(n.op));
    put_list(w, n.inputs, [&](int32_t v) { w.i32(v); });
    w.i32(n.output);
    put_list(w, n.ints, [&](int64_t v) { w.i64(v); });
    put_list(w, n.floats, [&](float v) { w.f32(v); });
  });
  put_list(w, p.steps, [&](const Step& s) {
    w.u32(static_cast<uint32_t>(s.kind));
    w.i32(s.a);
    w.i32(s.b);
    w.i32(s.table);
    w.i32(s.x2);
  });
  put_list(w, p.imports, [&](const Import& im) {
    w.i32(im.input);
    w.i32(im.tensor);
    w.u32(static_cast<uint32_t>(im.transfer));
  });
  put_list(w, p.exports, [&](const Export& e) {
    w.i32(e.tensor);
    w.u32(static_cast<uint32_t>(e.transfer));
  });
  return w.data();
}

Program deserialize(const void* data, size_t size) {
  if (!data || size < sizeof(kBlobMagic) + 4) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob truncated");
  if (std::memcmp(data, kBlobMagic, sizeof(kBlobMagic)) != 0) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "not an XNNPACK engine blob (bad magic)");
  }
  Reader r(data, size);
  char magic[sizeof(kBlobMagic)];
  r.raw().bytes(magic, sizeof(magic));
  uint32_t version = r.raw().u32();
  if (version != kBlobVersion) {
    fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "XNNPACK engine blob format version " + std::to_string(version) +
                                              ", this plugin reads version " + std::to_string(kBlobVersion));
  }
  Program p;
  auto read_types = [&](std::vector<ValueType>& types, std::vector<std::string>& names) {
    uint32_t n = r.count(kMaxCount, "boundary values");
    for (uint32_t i = 0; i < n; ++i) {
      names.push_back(r.raw().str(1 << 16));
      ValueType t;
      t.dtype = r.raw().i32();
      t.ranked = true;
      t.dims = r.dims();
      types.push_back(std::move(t));
    }
  };
  read_types(p.inputs, p.input_names);
  read_types(p.outputs, p.output_names);
  for (uint32_t i = 0, n = r.count(kMaxCount, "tensors"); i < n; ++i) {
    TensorDef t;
    t.kind = r.enum_value(TensorKind::kCount, "tensor kind");
    t.ref = r.raw().i32();
    t.dims = r.dims();
    t.dtype = r.enum_value(DType::kCount, "element type");
    t.zero_point = r.raw().i32();
    t.scales = r.floats();
    t.channel_dim = r.raw().i32();
    p.tensors.push_back(std::move(t));
  }
  for (uint32_t i = 0, n = r.count(kMaxCount, "constants"); i < n; ++i) {
    ConstantDef c;
    c.transform = r.enum_value(Transform::kCount, "constant transform");
    for (uint32_t k = 0, ns = r.count(8, "constant sources"); k < ns; ++k) {
      c.sources.push_back(r.raw().str(1 << 16));
      c.source_dims.push_back(r.dims());
      c.source_dtypes.push_back(r.raw().i32());
    }
    c.ints = r.ints();
    c.floats = r.floats();
    p.constants.push_back(std::move(c));
  }
  for (uint32_t i = 0, n = r.count(kMaxCount, "nodes"); i < n; ++i) {
    NodeDef nd;
    nd.op = r.enum_value(Op::kCount, "op");
    for (uint32_t k = 0, ni = r.count(8, "node inputs"); k < ni; ++k) nd.inputs.push_back(r.raw().i32());
    nd.output = r.raw().i32();
    nd.ints = r.ints();
    nd.floats = r.floats();
    p.nodes.push_back(std::move(nd));
  }
  for (uint32_t i = 0, n = r.count(kMaxCount, "steps"); i < n; ++i) {
    Step s;
    s.kind = r.enum_value(StepKind::kCount, "step kind");
    s.a = r.raw().i32();
    s.b = r.raw().i32();
    s.table = r.raw().i32();
    s.x2 = r.raw().i32();
    p.steps.push_back(s);
  }
  for (uint32_t i = 0, n = r.count(kMaxCount, "imports"); i < n; ++i) {
    Import im;
    im.input = r.raw().i32();
    im.tensor = r.raw().i32();
    im.transfer = r.enum_value(Transfer::kCount, "import transfer");
    p.imports.push_back(im);
  }
  for (uint32_t i = 0, n = r.count(kMaxCount, "exports"); i < n; ++i) {
    Export e;
    e.tensor = r.raw().i32();
    e.transfer = r.enum_value(Transfer::kCount, "export transfer");
    p.exports.push_back(e);
  }
  if (!r.raw().at_end()) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "blob: trailing bytes");
  validate(p);
  return p;
}

}  // namespace tessera_xnn
