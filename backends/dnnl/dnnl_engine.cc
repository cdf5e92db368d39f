// Builds an engine's plan: program ops -> oneDNN primitives with layouts.
//
// Input: a checked program, and (at load) the region's constants. Output:
// Mems, Steps, the arena plan, weights reordered once into the layouts the
// primitives chose. Method, op by op in program order:
//   1. each operand gets a Mem by its layout policy (dnnl_primitives.h): as
//      its producer left it, a plain view of it, or undecided (`any`);
//   2. the primitive descriptor is created; where it wants another layout
//      than the operand has, a reorder is planned once per (value, layout)
//      and shared by every later reader — for constants it runs here, at
//      load, into a buffer the engine owns; for activations it is a step,
//      which happens where plain data enters a blocked chain (region inputs,
//      the operands of MatMul/Softmax/LayerNorm/views);
//   3. the destination gets its Mem: its slice of a concatenation (below);
//      the host's output buffer when the value leaves the region and the
//      primitive writes it plain; the buffer of a sum post-op's operand when
//      that operand dies here (in place); else a fresh arena buffer.
// Concatenation in place: a channel Concat of a batch-1 tensor in a layout
// blocked by channels (nChw16c) is contiguous per operand, so each operand's
// producer (a convolution, pooling, binary) is asked to write that layout
// straight into its slice of the Concat's buffer, and the Concat itself
// costs nothing; an operand whose producer cannot (or a region input) is
// reordered into its slice. The blocked layout then flows on: a
// convolution reading a blocked value takes it as it is when oneDNN has a
// kernel for it, rather than choosing a layout that costs a reorder.
// Finally every region output not already written in place is reordered
// into the host's buffer, and the arena is planned from the steps that touch
// each buffer.
#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "dnnl_engine.h"
#include "dnnl_primitives.h"
#include "ops/qlinear_add_math.h"  // header-only, shared with native

namespace tessera_dnnl {

using dnnl::memory;
using tessera_plugin::fail;

namespace {

// The most extra multiply-adds (float ones count 4) that one thread of a step split by rows may do beyond an even
// share of the work (Builder::split_by_rows).
constexpr double kRowImbalanceMacs = 4.0 * (1 << 20);
// Channels up to which a plain convolution source is read as it is.
constexpr int64_t kImageChannels = 4;
// The scores of one chunk of an attention run by chunks (Builder::attention_chunk): 12 MiB. On whisper-tiny's encoder
// (6 heads, 1500 x 1500 scores), oneDNN's two matmuls took 18.0 ms unchunked and 13.5 / 14.6 / 16.3 / 19.0 ms by 300
// / 150 / 60 / 30 query rows (10.8 / 5.4 / 2.2 / 1.1 MB of scores).
constexpr int64_t kAttentionChunkBytes = int64_t{12} << 20;

// Reordered constant weights, shared: engines that reorder the same bytes (the same address, size and contents: a
// hash of them, since an address may be reused by other values once its owner is gone) from the same layout into the
// same one get one buffer, held while any of them lives. A ranged model's masked buckets (64 engines of one model,
// its constants one copy in the artifact) held a copy each: 186 MB for a CRNN.
std::shared_ptr<const AlignedBuffer> shared_reorder(const memory::desc& from, const void* bytes, const memory::desc& to,
                                                    const std::function<void(void*)>& fill) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::weak_ptr<const AlignedBuffer>>();  // never destroyed
  const size_t n = from.get_size();
  std::string key(reinterpret_cast<const char*>(&from.data), sizeof from.data);
  key.append(reinterpret_cast<const char*>(&to.data), sizeof to.data);
  const auto addr = reinterpret_cast<uintptr_t>(bytes);
  const size_t hash = std::hash<std::string_view>()(std::string_view(static_cast<const char*>(bytes), n));
  key.append(reinterpret_cast<const char*>(&addr), sizeof addr);
  key.append(reinterpret_cast<const char*>(&hash), sizeof hash);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(key); it != cache->end()) {
    if (auto held = it->second.lock()) return held;
  }
  for (auto it = cache->begin(); it != cache->end();) {  // forget buffers no engine holds
    it = it->second.expired() ? cache->erase(it) : std::next(it);
  }
  auto buf = std::make_shared<AlignedBuffer>(to.get_size());
  fill(buf->p);
  (*cache)[key] = buf;
  return buf;
}

class Builder {
 public:
  Builder(const Program& p, const dnnl::engine& eng, const std::map<std::string, const tessera_tensor_t*>* constants,
          int threads)
      : p_(p), eng_(eng), consts_(constants), dry_(constants == nullptr), threads_(threads) {}

  Plan build() {
    const size_t nv = p_.values.size();
    variants_.assign(nv, {});
    canon_.assign(nv, -1);
    last_use_.assign(nv, -1);
    first_output_.assign(nv, -1);
    for (size_t i = 0; i < p_.ops.size(); ++i) {
      for (int32_t id : p_.ops[i].in) {
        if (id >= 0) last_use_[static_cast<size_t>(id)] = static_cast<int>(i);
      }
      for (const PostOp& po : p_.ops[i].post) {
        if (po.operand >= 0) last_use_[static_cast<size_t>(po.operand)] = static_cast<int>(i);
      }
    }
    for (size_t j = 0; j < p_.outputs.size(); ++j) {
      const auto v = static_cast<size_t>(p_.outputs[j]);
      last_use_[v] = INT_MAX;
      if (first_output_[v] < 0) first_output_[v] = static_cast<int>(j);
    }
    plan_concats();
    for (size_t i = 0; i < p_.inputs.size(); ++i) {
      const int32_t v = p_.inputs[i];
      if (plugin_dtype(p_.values[static_cast<size_t>(v)].dtype)) {
        bind(v, add_mem(plain(v), Storage::kInput, static_cast<int>(i)));
      }
    }
    for (size_t v = 0; v < nv; ++v) {
      if (p_.values[v].kind != ValueKind::kConstant) continue;
      bind(static_cast<int32_t>(v), add_mem(plain(static_cast<int32_t>(v)), Storage::kFixed, fixed(constant_ptr(v))));
    }
    if (!dry_) stream_ = dnnl::stream(eng_);
    for (op_ = 0; op_ < p_.ops.size(); ++op_) {
      const int64_t chunk = attention_chunk(op_);
      if (chunk > 0) {
        build_attention(op_, chunk);
        op_ += 2;
        continue;
      }
      build_op(p_.ops[op_]);
    }
    for (size_t j = 0; j < p_.outputs.size(); ++j) {
      const int32_t v = p_.outputs[j];
      const int m = canon(v);
      const memory::desc want = plain(v);
      const Mem& mm = plan_.mems[static_cast<size_t>(m)];
      if (mm.storage == Storage::kOutput && mm.index == static_cast<int>(j) && mm.md == want) continue;
      reorder_step(m, add_mem(want, Storage::kOutput, static_cast<int>(j)), "output '" + p_.values[static_cast<size_t>(v)].name + "'");
    }
    plan_.arena_bytes = plan_arena(plan_.buffers);
    plan_chains();
    return std::move(plan_);
  }

 private:
  memory::desc plain(int32_t v) const {
    const Value& val = p_.values[static_cast<size_t>(v)];
    return plain_md(val.dims, data_type_of(val.dtype));
  }

  void* constant_ptr(size_t v) const {
    if (dry_) return nullptr;
    const std::string& name = p_.values[v].name;
    auto it = consts_->find(name);
    if (it == consts_->end()) fail(TESSERA_ERROR_INVALID_ARGUMENT, "constant '" + name + "' was not given");
    const tessera_tensor_t& t = *it->second;
    const Dims& d = p_.values[v].dims;
    std::string what = "constant '" + name + "'";
    const int32_t dtype = p_.values[v].dtype;
    if (t.dtype != dtype) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, what + " has dtype " + tessera_plugin::dtype_name(t.dtype) + ", expected " +
                                               tessera_plugin::dtype_name(dtype));
    }
    if (t.rank < 0 || static_cast<size_t>(t.rank) != d.size() || (t.rank > 0 && !t.dims) ||
        !std::equal(d.begin(), d.end(), t.dims)) {
      Dims given(t.dims, t.dims + std::max(0, t.dims ? t.rank : 0));
      fail(TESSERA_ERROR_INVALID_ARGUMENT, what + " has shape " + dims_str(given) + ", expected " + dims_str(d));
    }
    const size_t bytes = static_cast<size_t>(numel(d)) * tessera_plugin::dtype_size(dtype);
    if (t.size_bytes != bytes || !t.data) {
      fail(TESSERA_ERROR_INVALID_ARGUMENT, what + " has " + std::to_string(t.size_bytes) + " bytes, expected " +
                                               std::to_string(bytes));
    }
    return t.data;
  }

  int fixed(void* ptr) {
    plan_.fixed.push_back(ptr);
    return static_cast<int>(plan_.fixed.size() - 1);
  }

  int add_mem(const memory::desc& md, Storage s, int index) {
    plan_.mems.push_back(Mem{md, s, index});
    return static_cast<int>(plan_.mems.size() - 1);
  }

  // A Mem over the same storage as `of`, seen through `md`, holding value v.
  int alias_mem(int of, const memory::desc& md, int32_t v) {
    const Mem base = plan_.mems[static_cast<size_t>(of)];
    if (base.storage == Storage::kArena) buffer_values_[static_cast<size_t>(base.index)].push_back(v);
    const int m = add_mem(md, base.storage, base.index);
    plan_.mems[static_cast<size_t>(m)].offset = base.offset;
    return m;
  }

  int arena_mem(const memory::desc& md, int32_t v) {
    plan_.buffers.push_back(ArenaBuffer{md.get_size()});
    buffer_values_.push_back({v});
    return add_mem(md, Storage::kArena, static_cast<int>(plan_.buffers.size() - 1));
  }

  void bind(int32_t v, int m) {
    canon_[static_cast<size_t>(v)] = m;
    variants_[static_cast<size_t>(v)].push_back(m);
  }

  int canon(int32_t v) const {
    int m = canon_[static_cast<size_t>(v)];
    if (m < 0) fail(TESSERA_ERROR_INCOMPATIBLE_BLOB, "value '" + p_.values[static_cast<size_t>(v)].name + "' read before it is computed");
    return m;
  }

  void add_step(Step s) {
    const int at = static_cast<int>(plan_.steps.size());
    std::vector<int> used;
    for (const auto& [arg, m] : s.args) used.push_back(m);
    if (s.params >= 0) used.push_back(s.params);  // read by the run, not bound as an argument
    for (int m : used) {
      const Mem& mm = plan_.mems[static_cast<size_t>(m)];
      if (mm.storage != Storage::kArena) continue;
      ArenaBuffer& b = plan_.buffers[static_cast<size_t>(mm.index)];
      b.first = b.first < 0 ? at : std::min(b.first, at);
      b.last = std::max(b.last, at);
    }
    plan_.scratch_bytes = std::max(plan_.scratch_bytes, s.scratchpad.get_size());
    plan_.steps.push_back(std::move(s));
  }

  dnnl::reorder::primitive_desc reorder_pd(const memory::desc& from, const memory::desc& to) const {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::reorder::primitive_desc(eng_, from, eng_, to, attr);
  }

  void reorder_step(int from, int to, const std::string& what) {
    auto pd = reorder_pd(plan_.mems[static_cast<size_t>(from)].md, plan_.mems[static_cast<size_t>(to)].md);
    Step s;
    if (!dry_) s.prim = dnnl::reorder(pd);
    s.args = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    s.scratchpad = pd.scratchpad_desc();
    s.what = "reorder of " + what;
    s.impl = s.what + " " + pd.impl_info_str();
    ++plan_.reorders;
    add_step(std::move(s));
  }

  // A constant of layout md the plugin computes now, with fill(buffer), into a buffer the engine owns (a dry run
  // computes nothing).
  template <class Fill>
  int own_constant(const memory::desc& md, Fill fill) {
    if (dry_) return add_mem(md, Storage::kFixed, fixed(nullptr));
    AlignedBuffer buf(md.get_size());
    fill(buf.p);
    const int idx = fixed(buf.p);
    plan_.owned.push_back(std::move(buf));
    return add_mem(md, Storage::kFixed, idx);
  }

  // Converts a constant now, into a buffer shared with every engine of the process that converts the same bytes
  // into the same layout (shared_reorder).
  int convert_constant(int from, const memory::desc& md) {
    if (dry_) return add_mem(md, Storage::kFixed, fixed(nullptr));
    const Mem src = plan_.mems[static_cast<size_t>(from)];
    const void* bytes = plan_.fixed[static_cast<size_t>(src.index)];
    auto buf = shared_reorder(src.md, bytes, md, [&](void* to) {
      auto pd = reorder_pd(src.md, md);
      AlignedBuffer scratch(pd.scratchpad_desc().get_size());
      memory src_mem(src.md, eng_, const_cast<void*>(bytes));
      memory dst_mem(md, eng_, to);
      std::unordered_map<int, memory> args{{DNNL_ARG_FROM, src_mem}, {DNNL_ARG_TO, dst_mem}};
      if (scratch.p) args.emplace(DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), eng_, scratch.p));
      dnnl::reorder(pd).execute(stream_, args);
      stream_.wait();
    });
    const int idx = fixed(const_cast<void*>(buf->p));
    plan_.shared.push_back(std::move(buf));
    return add_mem(md, Storage::kFixed, idx);
  }

  // The bias of a convolution whose source zero point is in its bias (src_zero_point_in_bias): the op's constant
  // bias (none: 0) less the zero point times each output channel's weight sum, saturated to int32 as oneDNN's own
  // sums are.
  int zero_point_bias(const Op& op, const memory::desc& md) {
    return own_constant(md, [&](void* to) {
      const Dims& wd = p_.values[static_cast<size_t>(op.in[1])].dims;
      const int64_t m = wd[0], k = numel(wd) / m;
      const auto* w = static_cast<const int8_t*>(constant_ptr(static_cast<size_t>(op.in[1])));
      const auto* b =
          op.in[2] >= 0 ? static_cast<const int32_t*>(constant_ptr(static_cast<size_t>(op.in[2]))) : nullptr;
      const auto zp = static_cast<int64_t>(op.floats[0]);
      for (int64_t j = 0; j < m; ++j) {
        int64_t sum = 0;
        for (int64_t i = 0; i < k; ++i) sum += w[j * k + i];
        const int64_t v = (b ? b[j] : 0) - zp * sum;
        static_cast<int32_t*>(to)[j] = static_cast<int32_t>(
            std::clamp<int64_t>(v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
      }
    });
  }

  // Value v in layout md (same dims as v's), converting once.
  int as_layout(int32_t v, const memory::desc& md) {
    for (int m : variants_[static_cast<size_t>(v)]) {
      if (plan_.mems[static_cast<size_t>(m)].md == md) return m;
    }
    const int src = canon(v);
    int m;
    if (p_.values[static_cast<size_t>(v)].kind == ValueKind::kConstant) {
      m = convert_constant(src, md);
    } else {
      m = arena_mem(md, v);
      reorder_step(src, m, "'" + p_.values[static_cast<size_t>(v)].name + "'");
    }
    variants_[static_cast<size_t>(v)].push_back(m);
    return m;
  }

  // Value v's plain elements seen through `view` (another shape or strides).
  int as_view(int32_t v, const memory::desc& view) {
    for (int m : variants_[static_cast<size_t>(v)]) {
      if (plan_.mems[static_cast<size_t>(m)].md == view) return m;
    }
    const int base = as_layout(v, plain(v));
    if (plan_.mems[static_cast<size_t>(base)].md == view) return base;
    const int m = alias_mem(base, view, v);
    variants_[static_cast<size_t>(v)].push_back(m);
    return m;
  }

  // Weights read through `view`, in the layout `want` the primitive chose:
  // reordered at load when constant, else by a step of every run.
  int weights(int32_t v, const memory::desc& view, const memory::desc& want) {
    for (int m : variants_[static_cast<size_t>(v)]) {
      if (plan_.mems[static_cast<size_t>(m)].md == want) return m;
    }
    // Held row-major in the data type wanted (a bf16 result) and read row-major through other dims: the same
    // bytes.
    const int held = canon(v);
    const memory::desc& cur = plan_.mems[static_cast<size_t>(held)].md;
    if (is_row_major(view) && is_row_major(want) && is_row_major(cur) && cur.data_type() == want.data_type() &&
        cur.get_size() == want.get_size()) {
      const int m = alias_mem(held, want, v);
      variants_[static_cast<size_t>(v)].push_back(m);
      return m;
    }
    const int src = as_view(v, view);
    if (want == view) return src;
    int m;
    if (p_.values[static_cast<size_t>(v)].kind == ValueKind::kConstant) {
      m = convert_constant(src, want);
    } else {
      m = arena_mem(want, v);
      reorder_step(src, m, "weights '" + p_.values[static_cast<size_t>(v)].name + "'");
    }
    variants_[static_cast<size_t>(v)].push_back(m);
    return m;
  }

  // Channels blocked by the vector width (nChw16c with AVX-512, else nChw8c).
  static int64_t channel_block() {
    static const int64_t b = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core ? 16 : 8;
    return b;
  }
  static memory::desc channel_blocked(const Dims& d) {
    using tag = memory::format_tag;
    const bool b16 = channel_block() == 16;
    const tag t = d.size() == 3   ? (b16 ? tag::aBc16b : tag::aBc8b)
                  : d.size() == 4 ? (b16 ? tag::aBcd16b : tag::aBcd8b)
                                  : (b16 ? tag::aBcde16b : tag::aBcde8b);
    return memory::desc(d, memory::data_type::f32, t);
  }

  // Whether Concat `op` can be built in place: axis 1 of a batch-1 tensor
  // with 1 to 3 spatial dims, every operand's channels a whole number of
  // blocks, so that each operand is one contiguous run of the blocked layout.
  static bool concat_in_place(const Op& op, const std::vector<Value>& values) {
    const Dims& y = values[static_cast<size_t>(op.out)].dims;
    if (op.ints[0] != 1 || y.size() < 3 || y.size() > 5 || y[0] != 1) return false;
    for (int32_t v : op.in) {
      if (values[static_cast<size_t>(v)].dims[1] % channel_block() != 0) return false;
    }
    return true;
  }

  // Marks the Concat operands whose producers may write into their slice:
  // computed by an op that lets its destination layout be fixed, not a
  // region output, in one Concat once.
  void plan_concats() {
    const size_t nv = p_.values.size();
    slice_of_.assign(nv, -1);
    slice_pos_.assign(nv, -1);
    concat_mem_.assign(nv, -1);
    in_place_.assign(nv, false);
    std::vector<int> producer(nv, -1);
    for (size_t i = 0; i < p_.ops.size(); ++i) producer[static_cast<size_t>(p_.ops[i].out)] = static_cast<int>(i);
    for (size_t i = 0; i < p_.ops.size(); ++i) {
      const Op& op = p_.ops[i];
      if (op.kind != OpKind::kConcat || !concat_in_place(op, p_.values)) continue;
      for (size_t k = 0; k < op.in.size(); ++k) {
        const auto v = static_cast<size_t>(op.in[k]);
        const int pr = producer[v];
        if (pr < 0 || !takes_dst_layout(p_.ops[static_cast<size_t>(pr)]) || first_output_[v] >= 0 || slice_of_[v] >= 0 ||
            std::count(op.in.begin(), op.in.end(), op.in[k]) != 1) {
          continue;
        }
        slice_of_[v] = static_cast<int>(i);
        slice_pos_[v] = static_cast<int>(k);
      }
    }
  }

  // The Mem of operand k of Concat `c` inside the Concat's buffer (made by
  // the first slice asked for).
  int slice_mem(size_t c, size_t k) {
    const Op& op = p_.ops[c];
    int& whole = concat_mem_[static_cast<size_t>(op.out)];
    if (whole < 0) whole = arena_mem(channel_blocked(p_.values[static_cast<size_t>(op.out)].dims), op.out);
    const int32_t v = op.in[k];
    const Dims& d = p_.values[static_cast<size_t>(v)].dims;
    int64_t before = 0;  // channels of the operands ahead of this one
    for (size_t j = 0; j < k; ++j) before += p_.values[static_cast<size_t>(op.in[j])].dims[1];
    const int m = alias_mem(whole, channel_blocked(d), v);
    plan_.mems[static_cast<size_t>(m)].offset += static_cast<size_t>(before * (numel(d) / d[1])) * sizeof(float);
    return m;
  }

  int buffer_of(int m) const {
    const Mem& mm = plan_.mems[static_cast<size_t>(m)];
    return mm.storage == Storage::kArena ? mm.index : -1;
  }

  // Whether the destination may take over the buffer of sum operand O (Mem
  // m): nothing reads O or anything else in that buffer after this op, and no
  // other operand of this op lives in it.
  bool can_alias(int32_t o, int m, const memory::desc& dst, const std::vector<int>& others) const {
    const int b = buffer_of(m);
    if (b < 0 || plan_.mems[static_cast<size_t>(m)].md != dst || last_use_[static_cast<size_t>(o)] != static_cast<int>(op_)) {
      return false;
    }
    for (int32_t v : buffer_values_[static_cast<size_t>(b)]) {
      if (last_use_[static_cast<size_t>(v)] > static_cast<int>(op_)) return false;
    }
    for (int x : others) {
      if (buffer_of(x) == b) return false;
    }
    return true;
  }

  int new_dst(int32_t v, const memory::desc& md) {
    const int j = first_output_[static_cast<size_t>(v)];
    if (j >= 0 && is_plain(md)) return add_mem(md, Storage::kOutput, j);
    return arena_mem(md, v);
  }

  void build_op(const Op& op) {
    const std::string what = std::string(op_kind_name(op.kind)) + " '" + nodes_str(op) + "'";
    if (op.kind == OpKind::kView) {
      bind(op.out, alias_mem(as_view(op.in[0], plain(op.in[0])), plain(op.out), op.out));
      plan_.free_steps.push_back(FreeStep{plan_.steps.size(), op.nodes, "view (no work)"});
      return;
    }
    if (op.kind == OpKind::kConcat && concat_mem_[static_cast<size_t>(op.out)] >= 0) {
      build_concat_in_place(op);
      return;
    }
    if (op.kind == OpKind::kConcat && build_own_concat(op, what)) return;
    if (op.kind == OpKind::kResize) {
      build_own_resize(op, what);
      return;
    }
    if (op.kind == OpKind::kBatchNorm && op.post.empty()) {
      build_own_batch_norm(op, what);
      return;
    }
    if (op.kind == OpKind::kPool && !op.floats.empty()) {
      build_own_dequantizing_pool(op, what);
      return;
    }
    if (op.kind == OpKind::kSoftmax && own_softmax(op)) {
      build_own_softmax(op, what);
      return;
    }
    if (const int k = plane_operand(op, p_.values); k >= 0) {
      build_plane_binary(op, k, what);
      return;
    }
    if (own_elementwise(op.kind) || (own_eltwise(op) && dense(op.in[0], plan_.mems[static_cast<size_t>(canon(op.in[0]))].md))) {
      build_own(op, what);
      return;
    }
    if (dyn_u8(op, p_.values)) {
      build_dyn_u8(op, what);
      return;
    }
    if (op.impl == kOwnDwInt8 && own_dw_int8(op, p_.values) && build_own_dw_int8(op, what)) return;
    std::vector<OperandSpec> specs = operand_specs(op, p_.values);
    std::vector<int> mem(op.in.size(), -1);
    std::vector<memory::desc> md(op.in.size());
    for (size_t k = 0; k < specs.size(); ++k) {
      const int32_t v = op.in[k];
      switch (specs[k].layout) {
        case Layout::kAbsent: break;
        case Layout::kAsIs: mem[k] = canon(v); md[k] = plan_.mems[static_cast<size_t>(mem[k])].md; break;
        case Layout::kSameAsFirst: mem[k] = as_layout(v, md[0]); md[k] = md[0]; break;
        case Layout::kPlain: mem[k] = as_view(v, specs[k].md); md[k] = specs[k].md; break;
        case Layout::kAny: md[k] = specs[k].md; break;
      }
    }
    // A source (not weights) the primitive may choose the layout of is
    // offered as it is first when it is held channel-blocked, so that a
    // blocked chain (from an in-place Concat) is not reordered back, or when
    // it is plain with few channels (an image): oneDNN's first-layer kernels
    // read it directly, which saves the reorder of the whole input.
    std::vector<memory::desc> held = md;
    for (size_t k = 0; k < specs.size(); ++k) {
      if (specs[k].layout != Layout::kAny || specs[k].view.data.ndims > 0) continue;
      const memory::desc& cur = plan_.mems[static_cast<size_t>(canon(op.in[k]))].md;
      if (cur.dims() != md[k].dims() || cur.data_type() != md[k].data_type()) continue;
      const bool blocked = cur.data.format_kind == dnnl_blocked && cur.data.format_desc.blocking.inner_nblks > 0;
      const bool image = is_plain(cur) && cur.data.ndims >= 3 && cur.data.dims[1] <= kImageChannels;
      if (blocked || image) held[k] = cur;
    }
    // The destination's slice of a Concat built in place, when the producer
    // has a real kernel writing it.
    const int slice_c = slice_of_[static_cast<size_t>(op.out)];
    memory::desc slice_md;
    if (slice_c >= 0) slice_md = channel_blocked(p_.values[static_cast<size_t>(op.out)].dims);
    std::optional<dnnl::primitive_desc_base> chosen;
    auto attempt = [&](const std::vector<memory::desc>& in, const memory::desc* dst) {
      if (chosen) return;
      try {
        dnnl::primitive_desc_base pd = create_pd(op, p_.values, in, eng_, dst);
        // A reference kernel is far slower than a reorder around a fast one.
        if ((dst || &in != &md) && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) return;
        if (dst && pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_DST) != *dst) return;
        chosen = pd;
      } catch (const dnnl::error&) {
      }
    };
    if (slice_c >= 0) {
      attempt(held, &slice_md);
      attempt(md, &slice_md);
    }
    const bool in_slice = chosen.has_value();
    attempt(held, nullptr);
    if (!chosen && op.kind == OpKind::kPool && is_plain(md[0]) && md[0].data.ndims >= 3 && md[0].data.ndims <= 5) {
      // A pool's source held plain, where oneDNN has only its reference kernel (8-bit pooling over NCHW: resnet50's
      // QDQ first max pool took 5 ms so, against 0.04 ms on channels-last): reordered to channels-last first.
      std::vector<memory::desc> cl = held;
      cl[0] = channels_last_md(p_.values[static_cast<size_t>(op.in[0])].dims, md[0].data_type());
      attempt(cl, nullptr);
      if (chosen) mem[0] = as_layout(op.in[0], cl[0]);
    }
    if (!chosen) chosen = create_pd(op, p_.values, md, eng_);  // throws when oneDNN has nothing
    const dnnl::primitive_desc_base& pd = *chosen;
    for (size_t k = 0; k < specs.size(); ++k) {
      if (specs[k].layout == Layout::kAbsent) continue;
      const memory::desc want = pd.query_md(dnnl::query::exec_arg_md, specs[k].arg);
      const int32_t v = op.in[k];
      if (specs[k].layout == Layout::kAny) {
        const bool is_weights = specs[k].view.data.ndims > 0;
        mem[k] = is_weights ? weights(v, specs[k].view, want) : as_layout(v, want);
      } else if (plan_.mems[static_cast<size_t>(mem[k])].md != want) {
        fail(TESSERA_ERROR_COMPILE_FAILED, what + ": oneDNN asked for another layout of operand " + std::to_string(k));
      }
    }
    Step s;
    s.what = what;
    s.nodes = op.nodes;
    s.impl = std::string(dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(pd.get_kind()))) + " " +
             pd.impl_info_str();
    const bool zp_bias = src_zero_point_in_bias(op);  // the bias the primitive reads is computed here
    for (size_t k = 0; k < specs.size(); ++k) {
      if (mem[k] >= 0 && !(zp_bias && specs[k].arg == DNNL_ARG_BIAS)) s.args.emplace_back(specs[k].arg, mem[k]);
    }
    if (zp_bias) {
      s.args.emplace_back(DNNL_ARG_BIAS, zero_point_bias(op, pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_BIAS)));
    }
    int sum_operand = -1;
    for (size_t i = 0; i < op.post.size(); ++i) {
      const PostOp& po = op.post[i];
      if (po.kind == PostKind::kSum) sum_operand = po.operand;
      if (po.kind != PostKind::kBinary) continue;
      const int m = as_view(po.operand, post_operand_md(op, po, p_.values));
      s.args.emplace_back(DNNL_ARG_ATTR_MULTIPLE_POST_OP(first_post_arg(op) + static_cast<int>(i)) | DNNL_ARG_SRC_1, m);
    }
    if (op.kind == OpKind::kDynConv || op.kind == OpKind::kDynMatMul) {  // the run sets the scale, zero point from P
      s.params = canon(op.in[2]);
      s.w_scales = op.floats;
      s.scale_md = dyn_scale_md(op, p_.values);
    }
    const memory::desc dst_md = pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_DST);
    int dst;
    if (in_slice) {
      dst = slice_mem(static_cast<size_t>(slice_c), static_cast<size_t>(slice_pos_[static_cast<size_t>(op.out)]));
      in_place_[static_cast<size_t>(op.out)] = true;
      if (sum_operand >= 0) {
        reorder_step(canon(sum_operand), dst, "'" + p_.values[static_cast<size_t>(sum_operand)].name + "' into " + what);
      }
    } else if (sum_operand >= 0) {
      std::vector<int> others;
      for (const auto& [arg, m] : s.args) others.push_back(m);
      const int m = canon(sum_operand);
      if (can_alias(sum_operand, m, dst_md, others)) {
        dst = alias_mem(m, dst_md, op.out);  // in place: the residual is already in the destination
      } else {
        dst = new_dst(op.out, dst_md);
        reorder_step(m, dst, "'" + p_.values[static_cast<size_t>(sum_operand)].name + "' into " + what);
      }
    } else {
      dst = new_dst(op.out, dst_md);
    }
    s.args.emplace_back(DNNL_ARG_DST, dst);
    s.scratchpad = pd.scratchpad_desc();
    if (!dry_) s.prim = dnnl::primitive(pd.get());
    split_by_rows(s, op, &pd);
    add_step(std::move(s));
    // A MatMul, Softmax or LayerNorm writes its value through other (plain) dims.
    const Dims dd(dst_md.data.dims, dst_md.data.dims + dst_md.data.ndims);
    if (dd == p_.values[static_cast<size_t>(op.out)].dims) {
      bind(op.out, dst);
    } else {  // the same elements, in the destination's data type
      bind(op.out, alias_mem(dst, plain_md(p_.values[static_cast<size_t>(op.out)].dims, dst_md.data_type()), op.out));
    }
  }

  // A Concat the plugin's own loop copies (oneDNN's "simple" concatenation took 3-5 ms for one of YOLO's at
  // 640x640, several times a copy's time): of plain operands, along any axis, into a plain result (each operand's
  // block per outer index); along the channels where an operand is held channels-last (nwc / nhwc / ndhwc, as
  // oneDNN's int8 convolutions leave them) and the others channels-last or plain, into a channels-last result (each
  // position's channels, operand by operand).
  bool build_own_concat(const Op& op, const std::string& what) {
    if (!op.post.empty()) return false;
    auto held = [&](int32_t v) -> const memory::desc& { return plan_.mems[static_cast<size_t>(canon(v))].md; };
    auto channels_last = [&](int32_t v) {
      const Value& x = p_.values[static_cast<size_t>(v)];
      return channels_last_md(x.dims, data_type_of(x.dtype));
    };
    const size_t rank = p_.values[static_cast<size_t>(op.out)].dims.size();
    const bool all_plain = std::all_of(op.in.begin(), op.in.end(), [&](int32_t v) { return held(v) == plain(v); });
    size_t cl = 0;  // operands held channels-last (none when all are plain); the others must be plain
    for (int32_t v : op.in) {
      const bool is_cl = !all_plain && op.ints[0] == 1 && rank >= 3 && rank <= 5 && held(v) == channels_last(v);
      if (!is_cl && held(v) != plain(v)) return false;
      cl += is_cl;
    }
    Step s = own_step(op, what);
    s.impl = cl ? "concat of channels-last operands (own loop)" : "concat of plain operands (own loop)";
    s.concat_axis = cl ? -1 : static_cast<int>(op.ints[0]);
    for (size_t k = 0; k < op.in.size(); ++k) s.args.emplace_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(k), canon(op.in[k]));
    const int dst = new_dst(op.out, cl ? channels_last(op.out) : plain(op.out));
    s.args.emplace_back(DNNL_ARG_DST, dst);
    add_step(std::move(s));
    bind(op.out, dst);
    return true;
  }

  // Whether value v leaves the region as it is or through own elementwise loops alone (Quantize, Dequantize, a
  // unary table lookup: each keeps its operand's layout), so that writing v plain spares a reorder of what leaves.
  bool leaves_through_own_loops(int32_t v, int depth = 0) const {
    if (first_output_[static_cast<size_t>(v)] >= 0) return true;
    bool read = false;
    for (const Op& op : p_.ops) {
      const bool operand = std::find(op.in.begin(), op.in.end(), v) != op.in.end();
      const bool post = std::any_of(op.post.begin(), op.post.end(), [&](const PostOp& po) { return po.operand == v; });
      if (!operand && !post) continue;
      const bool own = op.kind == OpKind::kQuantize || op.kind == OpKind::kDequantize ||
                       (op.kind == OpKind::kLookup && op.in.size() == 2);
      if (post || !own || op.in[0] != v || depth >= 8 || !leaves_through_own_loops(op.out, depth + 1)) return false;
      read = true;
    }
    return read;
  }

  // A Resize as the plugin's own loop: X held as [outer][spatial...][run] (channels-last: a position's channels;
  // channel-blocked, as oneDNN's convolutions leave it: a block's 8 or 16 channels, padding included; plain: one
  // element) is resized a run at a time into a result of the same layout; any other layout is read plain. A bilinear
  // one that leaves the region (a segmentation net's last upsampling, the largest tensor of the net) writes it plain
  // instead (also when only Quantize, Dequantize and lookups stand between it and the region's end: they keep its
  // layout): a reorder of it afterwards took longer than the resize.
  void build_own_resize(const Op& op, const std::string& what) {
    const Value& xv = p_.values[static_cast<size_t>(op.in[0])];
    const Dims& yd = p_.values[static_cast<size_t>(op.out)].dims;
    const memory::data_type dt = data_type_of(xv.dtype);
    const size_t r = xv.dims.size();
    int x = canon(op.in[0]);
    const memory::desc held = plan_.mems[static_cast<size_t>(x)].md;
    memory::desc out = plain(op.out);
    int64_t run = 1;
    const char* layout = "plain";
    auto blocked = [&](const Dims& d, int64_t b) {
      using tag = memory::format_tag;
      const tag t = b == 16 ? (r == 3   ? tag::aBc16b
                               : r == 4 ? tag::aBcd16b
                                        : tag::aBcde16b)
                            : (r == 3   ? tag::aBc8b
                               : r == 4 ? tag::aBcd8b
                                        : tag::aBcde8b);
      return memory::desc(d, dt, t);
    };
    if (held == channels_last_md(xv.dims, dt)) {
      run = xv.dims[1];
      out = channels_last_md(yd, dt);
      layout = "channels-last";
    } else if (held == blocked(xv.dims, 16) || held == blocked(xv.dims, 8)) {
      run = held == blocked(xv.dims, 16) ? 16 : 8;
      out = blocked(yd, run);
      layout = "blocked";
    } else if (held != plain(op.in[0])) {
      x = as_layout(op.in[0], plain(op.in[0]));
    }
    Step s = own_step(op, what);
    s.plain_dst = !op.floats.empty() && run > 1 && leaves_through_own_loops(op.out);
    if (s.plain_dst) out = plain(op.out);
    s.impl = std::string(op.floats.empty() ? "nearest" : "bilinear") + " resize, " + layout +
             (s.plain_dst ? " to plain" : "") + " (own loop)";
    s.inner = run;
    s.resize_index = op.ints;
    s.resize_weights = op.floats;
    s.args.emplace_back(DNNL_ARG_SRC_0, x);
    const int dst = new_dst(op.out, out);
    s.args.emplace_back(DNNL_ARG_DST, dst);
    add_step(std::move(s));
    bind(op.out, dst);
  }

  // A dequantizing global average pool (kPool with floats): its 8-bit source read channels-last or plain (held in
  // another layout, reordered plain first), its float result plain.
  void build_own_dequantizing_pool(const Op& op, const std::string& what) {
    const Value& xv = p_.values[static_cast<size_t>(op.in[0])];
    int x = canon(op.in[0]);
    const memory::desc held = plan_.mems[static_cast<size_t>(x)].md;
    int64_t inner = numel(Dims(xv.dims.begin() + 2, xv.dims.end()));
    if (held == channels_last_md(xv.dims, data_type_of(xv.dtype))) {
      inner = 1;
    } else if (held != plain(op.in[0])) {
      x = as_layout(op.in[0], plain(op.in[0]));
    }
    Step s = own_step(op, what);
    s.impl =
        std::string("dequantizing global average pool, ") + (inner == 1 ? "channels-last" : "plain") + " (own loop)";
    s.inner = inner;
    s.scale = op.floats[0];
    s.zero_point = op.floats[1];
    s.int8 = xv.dtype == TESSERA_DTYPE_INT8;
    s.args.emplace_back(DNNL_ARG_SRC_0, x);
    const int dst = new_dst(op.out, plain(op.out));
    s.args.emplace_back(DNNL_ARG_DST, dst);
    add_step(std::move(s));
    bind(op.out, dst);
  }

  // BatchNormalization (inference) as the plugin's own loop, y = x * a[c] + b[c] with a = scale / sqrt(var + eps)
  // and b = bias - mean * a each rounded in ONNX Runtime's order, as native computes it (oneDNN's normalization
  // differs in the last bit, which a requantization after it turns into steps), over X held channels-last or plain.
  void build_own_batch_norm(const Op& op, const std::string& what) {
    const Dims& xd = p_.values[static_cast<size_t>(op.in[0])].dims;
    int x = canon(op.in[0]);
    memory::desc md = plan_.mems[static_cast<size_t>(x)].md;
    int64_t inner = numel(Dims(xd.begin() + 2, xd.end()));
    if (xd.size() >= 3 && md == channels_last_md(xd)) {
      inner = 1;
    } else if (md != plain(op.in[0])) {
      x = as_layout(op.in[0], plain(op.in[0]));
      md = plain(op.in[0]);
    }
    Step s = own_step(op, what);
    s.impl = "batch normalization as ONNX Runtime computes it (own loop)";
    s.inner = inner;
    s.scale = op.floats[0];
    s.args.emplace_back(DNNL_ARG_SRC_0, x);
    const int args[] = {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE};
    for (size_t k = 1; k < 5; ++k) s.args.emplace_back(args[k - 1], as_view(op.in[k], plain(op.in[k])));
    const int dst = new_dst(op.out, md);
    s.args.emplace_back(DNNL_ARG_DST, dst);
    add_step(std::move(s));
    bind(op.out, dst);
  }

  // Softmax or LogSoftmax of float32 over the last dim of its view, nothing fused after it, on a CPU with AVX-512:
  // the plugin's own loop over the rows (ops/kernels/softmax_row.h, native's code), as oneDNN 2.7's softmax_v2 took
  // 2-2.5x native's time (attention's [1, 6, 1500, 1500]: 6.0 against 2.5 ms, 2 threads).
  bool own_softmax(const Op& op) const {
    return op.post.empty() && !op.ints.empty() && op.ints.back() == op.ints[0] - 1 &&
           p_.values[static_cast<size_t>(op.in[0])].dtype == TESSERA_DTYPE_FLOAT32 && own_avx512_loops();
  }

  void build_own_softmax(const Op& op, const std::string& what) {
    const Dims view(op.ints.begin() + 1, op.ints.end() - 1);
    Step s = own_step(op, what);
    s.impl = std::string(op.alg == dnnl_softmax_log ? "log-softmax" : "softmax") + " rows (own loop)";
    s.alg = op.alg;
    s.inner = view.back();  // the row length
    s.args.emplace_back(DNNL_ARG_SRC_0, as_layout(op.in[0], plain(op.in[0])));
    const int dst = new_dst(op.out, plain(op.out));
    s.args.emplace_back(DNNL_ARG_DST, dst);
    add_step(std::move(s));
    bind(op.out, dst);
  }

  // A plane binary (plane_operand): X op P by the plugin's own loop, in X's layout where that is plain, channels-last
  // or blocked by whole blocks of channels (else X is made plain), into X's buffer where X dies here.
  void build_plane_binary(const Op& op, int k, const std::string& what) {
    const int32_t xv = op.in[static_cast<size_t>(1 - k)], pv = op.in[static_cast<size_t>(k)];
    const Dims& xd = p_.values[static_cast<size_t>(xv)].dims;
    int x = canon(xv);
    memory::desc md = plan_.mems[static_cast<size_t>(x)].md;
    int64_t layout = -1;  // Step::inner: 0 plain, 1 channels-last, 8 or 16 channels blocked by that many
    if (md == plain(xv)) {
      layout = 0;
    } else if (md == channels_last_md(xd)) {
      layout = 1;
    } else {
      using tag = memory::format_tag;
      for (const int64_t b : {int64_t{8}, int64_t{16}}) {
        const tag t = xd.size() == 3   ? (b == 16 ? tag::aBc16b : tag::aBc8b)
                      : xd.size() == 4 ? (b == 16 ? tag::aBcd16b : tag::aBcd8b)
                                       : (b == 16 ? tag::aBcde16b : tag::aBcde8b);
        if (xd[1] % b == 0 && md == memory::desc(xd, memory::data_type::f32, t)) layout = b;
      }
    }
    if (layout < 0) {
      md = plain(xv);
      x = as_layout(xv, md);
      layout = 0;
    }
    const Dims& pdims = p_.values[static_cast<size_t>(pv)].dims;
    Dims pd(xd.size() - pdims.size(), 1);
    pd.insert(pd.end(), pdims.begin(), pdims.end());
    Step s = own_step(op, what);
    s.alg = op.alg;
    s.inner = layout;
    s.impl = std::string(op.alg == dnnl_binary_mul ? "multiply" : "add") + " by a plane over " +
             (layout == 0   ? "plain"
              : layout == 1 ? "channels-last"
                            : "channel-blocked") +
             " channels (own loop)";
    s.args.emplace_back(DNNL_ARG_SRC_0, x);
    const int pm = as_view(pv, plain_md(pd));
    s.args.emplace_back(DNNL_ARG_SRC_1, pm);
    const int dst = first_output_[static_cast<size_t>(op.out)] < 0 && can_alias(xv, x, md, {pm})
                        ? alias_mem(x, md, op.out)
                        : new_dst(op.out, md);
    s.args.emplace_back(DNNL_ARG_DST, dst);
    add_step(std::move(s));
    bind(op.out, dst);
  }

  // An int8 depthwise convolution the plugin runs itself (choose_impl timed it against oneDNN's; dnnl_dw_int8.h), its
  // source and destination channels-last, as oneDNN's int8 convolutions around it hold theirs. False where the kernel
  // refuses the weights (make_dw_int8): oneDNN's then.
  bool build_own_dw_int8(const Op& op, const std::string& what) {
    const Value& x = p_.values[static_cast<size_t>(op.in[0])];
    const Value& y = p_.values[static_cast<size_t>(op.out)];
    std::shared_ptr<const DwInt8> kernel;
    if (!dry_) {
      const auto* w = static_cast<const int8_t*>(constant_ptr(static_cast<size_t>(op.in[1])));
      const auto* b =
          op.in[2] >= 0 ? static_cast<const int32_t*>(constant_ptr(static_cast<size_t>(op.in[2]))) : nullptr;
      kernel = own_dw_int8_kernel(op, p_.values, w, b);
      if (!kernel || kernel->oh != y.dims[2] || kernel->ow != y.dims[3]) return false;
    }
    Step s = own_step(op, what);
    s.impl = "int8 depthwise convolution (own loop, VNNI)";
    s.dw = std::move(kernel);
    s.args.emplace_back(DNNL_ARG_SRC_0, as_layout(op.in[0], channels_last_md(x.dims, data_type_of(x.dtype))));
    const int dst = new_dst(op.out, channels_last_md(y.dims, data_type_of(y.dtype)));
    s.args.emplace_back(DNNL_ARG_DST, dst);
    split_by_rows(s, op, nullptr);
    add_step(std::move(s));
    bind(op.out, dst);
    return true;
  }

  // Builds step `s`, the convolution `op` by oneDNN's primitive `pd` (null: by the own depthwise kernel), also as
  // one slice per thread (Step::slices) where each thread can keep to its part: of the output rows of one image, or
  // of the images of a batch (2-D), the source and destination held channels-last (so that a slice is one run of
  // bytes), each binary post-op's operand one value per channel, a row or image or more for each thread, and oneDNN
  // has a kernel for every slice (those of the same shape and padding share one).
  void split_by_rows(Step& s, const Op& op, const dnnl::primitive_desc_base* pd) {
    if (threads_ < 2 || (op.kind != OpKind::kConv && op.kind != OpKind::kQConv) || op.bf16 || op.bf16_dst ||
        op.ints.empty() || op.ints[0] != 2) {
      return;
    }
    const Value& x = p_.values[static_cast<size_t>(op.in[0])];
    const Value& y = p_.values[static_cast<size_t>(op.out)];
    if (x.dims.size() != 4) return;
    const bool by_images = x.dims[0] > 1;
    const int64_t units = by_images ? x.dims[0] : y.dims[2];  // images or output rows, shared out
    if (units < threads_) return;
    // Units that do not divide among the threads leave one thread the extra units' work while the others wait: only
    // where that is small against what a chain saves per step (a fork and join, and reading what another core
    // wrote). mobilenet_v2's QDQ twin ran faster with its 7-row steps split (at most 2.1M extra multiply-adds),
    // resnet50's slower (7.3M and more).
    const Dims& wd = p_.values[static_cast<size_t>(op.in[1])].dims;
    const int64_t per_thread = (units + threads_ - 1) / threads_;
    const double macs = static_cast<double>(numel(y.dims)) * static_cast<double>(numel(wd) / wd[0]);
    const double extra = macs * (static_cast<double>(per_thread * threads_) / static_cast<double>(units) - 1.0);
    if (extra * (op.kind == OpKind::kQConv ? 1.0 : 4.0) > kRowImbalanceMacs) return;
    for (const PostOp& po : op.post) {
      if (po.kind != PostKind::kBinary) continue;
      const Dims& d = p_.values[static_cast<size_t>(po.operand)].dims;
      if (numel(d) != 1 && !(d.size() == 4 && d[0] == 1 && d[2] == 1 && d[3] == 1)) return;
    }
    const int src_arg = pd ? DNNL_ARG_SRC : DNNL_ARG_SRC_0;
    const memory::data_type xt = data_type_of(x.dtype), yt = data_type_of(y.dtype);
    auto held_as = [&](int arg, const memory::desc& want) {
      return std::any_of(s.args.begin(), s.args.end(), [&](const std::pair<int, int>& a) {
        return a.first == arg && plan_.mems[static_cast<size_t>(a.second)].md == want;
      });
    };
    if (!held_as(src_arg, channels_last_md(x.dims, xt)) || !held_as(DNNL_ARG_DST, channels_last_md(y.dims, yt))) return;
    const memory::desc weights = pd ? pd->query_md(dnnl::query::exec_arg_md, DNNL_ARG_WEIGHTS) : memory::desc();
    const memory::desc bias = pd ? pd->query_md(dnnl::query::exec_arg_md, DNNL_ARG_BIAS) : memory::desc();
    const int64_t oh = y.dims[2];
    const size_t x_row = channels_last_md(x.dims, xt).get_size() / static_cast<size_t>(x.dims[0] * x.dims[2]);
    const size_t y_row = channels_last_md(y.dims, yt).get_size() / static_cast<size_t>(y.dims[0] * oh);
    struct Made {
      dnnl::primitive prim;
      memory::desc scratchpad;
      std::string impl;
    };
    std::map<std::array<int64_t, 5>, Made> made;
    std::vector<Slice> slices;
    for (int t = 0; t < threads_; ++t) {
      Slice sl;
      const int64_t u0 = units * t / threads_, u1 = units * (t + 1) / threads_;
      sl.n0 = by_images ? u0 : 0;
      sl.n1 = by_images ? u1 : 1;
      sl.r0 = by_images ? 0 : u0;
      sl.r1 = by_images ? oh : u1;
      const int64_t images = sl.n1 - sl.n0;
      const RowSlice r = row_slice(op, p_.values, sl.r0, sl.r1);
      if (pd) {
        const std::array<int64_t, 5> key{images, r.in1 - r.in0, sl.r1 - sl.r0, r.pad_top, r.pad_bottom};
        auto it = made.find(key);
        if (it == made.end()) {
          try {
            const dnnl::primitive_desc_base sp =
                create_row_slice_pd(op, p_.values, images, sl.r0, sl.r1, weights, bias, eng_);
            // Not oneDNN's reference or gemm-based kernels (svtr's 1x1 over one row of its 2-row map fell to ref:any:
            // 487 ms, against 0.2 whole).
            const std::string impl = sp.impl_info_str();
            if (impl.rfind("ref", 0) == 0 || impl.find("gemm") != std::string::npos) return;
            if (sp.query_md(dnnl::query::exec_arg_md, DNNL_ARG_WEIGHTS) != weights) return;
            it = made.emplace(key,
                              Made{dry_ ? dnnl::primitive() : dnnl::primitive(sp.get()), sp.scratchpad_desc(), impl})
                     .first;
          } catch (const dnnl::error&) {
            return;
          }
        }
        sl.prim = it->second.prim;
        sl.scratchpad = it->second.scratchpad;
        sl.impl = it->second.impl;
      }
      for (const auto& [arg, m] : s.args) {
        Slice::Arg a{arg, m, 0, plan_.mems[static_cast<size_t>(m)].md};
        if (arg == src_arg) {
          a.offset = static_cast<size_t>(sl.n0 * x.dims[2] + r.in0) * x_row;
          a.md = channels_last_md(Dims{images, x.dims[1], r.in1 - r.in0, x.dims[3]}, xt);
        } else if (arg == DNNL_ARG_DST) {
          a.offset = static_cast<size_t>(sl.n0 * oh + sl.r0) * y_row;
          a.md = channels_last_md(Dims{images, y.dims[1], sl.r1 - sl.r0, y.dims[3]}, yt);
        }
        sl.args.push_back(std::move(a));
      }
      slices.push_back(std::move(sl));
    }
    s.slices = std::move(slices);
  }

  // Groups consecutive steps built with slices into chains of two or more (Step::chain, chained) and places the
  // barriers inside them (Step::barrier) from the bytes each slice reads and writes: in the arena (its offsets
  // planned: buffers whose steps do not overlap may share bytes, and the threads of a chain run apart), the region's
  // inputs and outputs. Constants are only read. Sizes the scratchpads of the slices, one per thread.
  void plan_chains() {
    struct Touch {
      Storage storage;
      int index;
      size_t lo, hi;
      bool write;
      size_t slice;
    };
    auto touches = [&](const Step& st) {
      std::vector<Touch> out;
      for (size_t t = 0; t < st.slices.size(); ++t) {
        for (const Slice::Arg& a : st.slices[t].args) {
          const Mem& m = plan_.mems[static_cast<size_t>(a.mem)];
          if (m.storage == Storage::kFixed) continue;
          size_t lo = m.offset + a.offset;
          if (m.storage == Storage::kArena) lo += plan_.buffers[static_cast<size_t>(m.index)].offset;
          out.push_back(Touch{m.storage, m.storage == Storage::kArena ? 0 : m.index, lo, lo + a.md.get_size(),
                              a.arg == DNNL_ARG_DST, t});
        }
      }
      return out;
    };
    auto clash = [](const Touch& a, const Touch& b) {
      return a.slice != b.slice && a.storage == b.storage && a.index == b.index && a.lo < b.hi && b.lo < a.hi &&
             (a.write || b.write);
    };
    std::vector<Step>& steps = plan_.steps;
    for (size_t i = 0; i < steps.size();) {
      size_t j = i;
      while (j < steps.size() && !steps[j].slices.empty()) ++j;
      if (j - i >= 2) {
        steps[i].chain = j - i;
        std::vector<Touch> since;  // since the chain's start or its last barrier
        for (size_t k = i; k < j; ++k) {
          steps[k].chained = true;
          // What the profile shows: how the step is shared out, and the slices' kernel where oneDNN runs them.
          const std::string& slice_impl = steps[k].slices[0].impl;
          const char* by = steps[k].slices.back().n0 > 0 ? ", by images" : ", by rows";
          steps[k].impl += slice_impl.empty() ? by : by + (": " + slice_impl);
          const std::vector<Touch> mine = touches(steps[k]);
          const bool wait = std::any_of(mine.begin(), mine.end(), [&](const Touch& a) {
            return std::any_of(since.begin(), since.end(), [&](const Touch& b) { return clash(a, b); });
          });
          if (wait) {
            steps[k].barrier = true;
            since.clear();
          }
          since.insert(since.end(), mine.begin(), mine.end());
          for (const Slice& sl : steps[k].slices)
            plan_.slice_scratch = std::max(plan_.slice_scratch, sl.scratchpad.get_size());
        }
      }
      i = std::max(j, i + 1);
    }
    plan_.slice_scratch = (plan_.slice_scratch + 4095) / 4096 * 4096;
    plan_.scratch_bytes = std::max(plan_.scratch_bytes, plan_.slice_scratch * static_cast<size_t>(threads_));
  }

  // Query rows per chunk where ops i, i+1, i+2 are an attention to run by chunks (0: they are not): a float32 MatMul
  // Q x K (no bias; eltwise post-ops, a scale; binary ones whose operand holds one row per query row or one for all, a
  // mask) whose scores only an own Softmax over their last dim reads, whose
  // probabilities only a MatMul P x V (no bias; eltwise post-ops) reads as its first operand, as they are; K and V
  // computed; the batch dims of Q, the scores and the result alike. A chunk takes as many query rows as keep its
  // scores within kAttentionChunkBytes; fewer than all of them, or no chunks.
  int64_t attention_chunk(size_t i) const {
    if (i + 2 >= p_.ops.size()) return 0;
    const Op& o1 = p_.ops[i];
    const Op& o2 = p_.ops[i + 1];
    const Op& o3 = p_.ops[i + 2];
    // Q x K may also add operands (a mask), P x V only apply eltwise post-ops.
    auto plain_product = [&](const Op& o, bool binary) {
      if (o.kind != OpKind::kMatMul || o.bf16 || o.bf16_dst || (o.in.size() > 2 && o.in[2] >= 0)) return false;
      if (p_.values[static_cast<size_t>(o.in[1])].kind == ValueKind::kConstant) return false;
      return std::all_of(o.post.begin(), o.post.end(), [&](const PostOp& po) {
        return po.kind == PostKind::kEltwise || (binary && po.kind == PostKind::kBinary);
      });
    };
    // Read once, by the next op, inside the region.
    auto passed_on = [&](int32_t v, size_t reader) {
      const auto k = static_cast<size_t>(v);
      return last_use_[k] == static_cast<int>(reader) && first_output_[k] < 0 && slice_of_[k] < 0;
    };
    if (!plain_product(o1, true) || !plain_product(o3, false) || o2.kind != OpKind::kSoftmax || !own_softmax(o2) ||
        o2.alg == dnnl_softmax_log || o2.in[0] != o1.out || o3.in[0] != o2.out || !passed_on(o1.out, i + 1) ||
        !passed_on(o2.out, i + 2)) {
      return 0;
    }
    for (const int32_t v : {o1.out, o2.out}) {
      for (const PostOp& po : o3.post) {
        if (po.operand == v) return 0;
      }
    }
    for (const int32_t v : {o1.in[0], o1.in[1], o1.out, o2.out, o3.in[1], o3.out}) {
      if (p_.values[static_cast<size_t>(v)].dtype != TESSERA_DTYPE_FLOAT32) return 0;
    }
    MatMulOperands m1, m3;
    if (!matmul_operands(o1, &m1) || !matmul_operands(o3, &m3)) return 0;
    const Dims d1 = dst_dims(o1, p_.values), d3 = dst_dims(o3, p_.values);
    const size_t r = d1.size();
    if (r < 3 || d3.size() != r || m1.read[0].size() != r || m3.stored[0] != d1) return 0;
    for (size_t k = 0; k < r; ++k) {
      if (m3.perm[0][k] != static_cast<int64_t>(k)) return 0;                 // P read as the scores are held
      if (k + 2 < r && (m1.read[0][k] != d1[k] || d3[k] != d1[k])) return 0;  // no broadcast of Q's batch dims
    }
    const int64_t rows = d1[r - 2], keys = d1[r - 1];
    const Dims view(o2.ints.begin() + 1, o2.ints.end() - 1);  // the softmax's view of the scores
    if (m1.read[0][r - 2] != rows || d3[r - 2] != rows || view.empty() || view.back() != keys) return 0;
    // A mask's rows: one for every query row, or one for all (broadcast), at the scores' rank.
    for (const PostOp& po : o1.post) {
      if (po.kind != PostKind::kBinary) continue;
      const memory::desc md = post_operand_md(o1, po, p_.values);
      if (p_.values[static_cast<size_t>(po.operand)].dtype != TESSERA_DTYPE_FLOAT32 ||
          md.data.ndims != static_cast<int>(r) || (md.data.dims[r - 2] != 1 && md.data.dims[r - 2] != rows)) {
        return 0;
      }
    }
    const int64_t heads = numel(d1) / (rows * keys);
    const int64_t chunk = std::max<int64_t>(1, kAttentionChunkBytes / (heads * keys * 4));
    return chunk < rows ? chunk : 0;
  }

  // Attention ops i, i+1, i+2 (attention_chunk) as one step: per chunk of query rows, Q x K (a mask read at the
  // chunk's rows) into a buffer of that chunk's scores, the softmax rows in place, then P x V into the chunk's rows of
  // Y (AttentionChunks, run_attention).
  void build_attention(size_t i, int64_t chunk) {
    const Op& o1 = p_.ops[i];
    const Op& o2 = p_.ops[i + 1];
    const Op& o3 = p_.ops[i + 2];
    const std::vector<OperandSpec> sp1 = operand_specs(o1, p_.values), sp3 = operand_specs(o3, p_.values);
    const memory::desc qv = sp1[0].md, kv = sp1[1].md, vv = sp3[1].md;
    const Dims d1 = dst_dims(o1, p_.values), d3 = dst_dims(o3, p_.values);
    const size_t r = d1.size();
    auto a = std::make_shared<AttentionChunks>();
    a->rows = d1[r - 2];
    a->chunk = chunk;
    a->row_len = d1[r - 1];
    a->heads = numel(d1) / (a->rows * a->row_len);
    a->q_row = qv.data.format_desc.blocking.strides[r - 2];
    a->y_row = d3[r - 1];
    a->k = kv;
    a->v = vv;
    std::vector<memory::desc> masks;  // each binary post-op's operand, whole
    for (size_t j = 0; j < o1.post.size(); ++j) {
      const PostOp& po = o1.post[j];
      if (po.kind != PostKind::kBinary) continue;
      const memory::desc md = post_operand_md(o1, po, p_.values);
      const bool per_row = md.data.dims[r - 2] == a->rows && a->rows > 1;
      a->mask_post.push_back(static_cast<int>(j));
      a->mask_row.push_back(per_row ? md.data.format_desc.blocking.strides[r - 2] : 0);
      masks.push_back(md);
    }
    size_t scratch = 0;
    std::string impl;
    for (const int64_t rows : {chunk, a->rows % chunk}) {
      if (rows == 0) continue;
      AttentionChunks::Part part;
      part.rows = rows;
      Dims qd(qv.data.dims, qv.data.dims + r), sd = d1, yd = d3;
      qd[r - 2] = sd[r - 2] = yd[r - 2] = rows;
      part.q = memory::desc(qd, memory::data_type::f32,
                            Dims(qv.data.format_desc.blocking.strides, qv.data.format_desc.blocking.strides + r));
      part.s = plain_md(sd);
      part.y = memory::desc(yd, memory::data_type::f32, row_major(d3));  // the rows of Y's [.., rows, N]
      for (size_t j = 0; j < masks.size(); ++j) {  // the chunk's rows, or the one row every chunk reads
        Dims md(masks[j].data.dims, masks[j].data.dims + r);
        if (a->mask_row[j] != 0) md[r - 2] = rows;
        part.masks.emplace_back(
            md, memory::data_type::f32,
            Dims(masks[j].data.format_desc.blocking.strides, masks[j].data.format_desc.blocking.strides + r));
      }
      const dnnl::matmul::primitive_desc ps = matmul_chunk_pd(o1, p_.values, part.q, kv, part.s, part.masks, eng_);
      const dnnl::matmul::primitive_desc pv = matmul_chunk_pd(o3, p_.values, part.s, vv, part.y, {}, eng_);
      if (impl.empty()) impl = ps.impl_info_str();
      part.scratch_scores = ps.scratchpad_desc();
      part.scratch_values = pv.scratchpad_desc();
      scratch = std::max({scratch, part.scratch_scores.get_size(), part.scratch_values.get_size()});
      if (!dry_) {
        part.scores = dnnl::matmul(ps);
        part.values = dnnl::matmul(pv);
      }
      a->parts.push_back(std::move(part));
    }
    Step s = own_step(o1, "attention '" + nodes_str(o1) + "+" + nodes_str(o2) + "+" + nodes_str(o3) + "'");
    s.nodes.insert(s.nodes.end(), o2.nodes.begin(), o2.nodes.end());
    s.nodes.insert(s.nodes.end(), o3.nodes.begin(), o3.nodes.end());
    s.impl = "attention by chunks of " + std::to_string(chunk) + " query rows (matmul " + impl + ", own softmax)";
    s.args.emplace_back(DNNL_ARG_SRC_0, as_view(o1.in[0], qv));
    s.args.emplace_back(DNNL_ARG_SRC_1, as_view(o1.in[1], kv));
    s.args.emplace_back(DNNL_ARG_SRC_2, as_view(o3.in[1], vv));
    s.args.emplace_back(DNNL_ARG_WORKSPACE, arena_mem(a->parts[0].s, o1.out));
    for (size_t j = 0; j < masks.size(); ++j) {
      const PostOp& po = o1.post[static_cast<size_t>(a->mask_post[j])];
      s.args.emplace_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(j), as_view(po.operand, masks[j]));
    }
    if (scratch > 0)
      s.scratchpad = memory::desc({static_cast<int64_t>(scratch)}, memory::data_type::u8, memory::format_tag::a);
    const int dst = new_dst(o3.out, plain(o3.out));
    s.args.emplace_back(DNNL_ARG_DST, dst);
    s.attention = std::move(a);
    add_step(std::move(s));
    bind(o3.out, dst);
  }

  // A step of `op` the plugin runs itself (Step::own).
  static Step own_step(const Op& op, const std::string& what) {
    Step s;
    s.what = what;
    s.nodes = op.nodes;
    s.own = true;
    s.kind = op.kind;
    return s;
  }

  // Whether `md` holds value v's elements with no padding.
  bool dense(int32_t v, const memory::desc& md) const {
    const Value& x = p_.values[static_cast<size_t>(v)];
    return md.get_size() == static_cast<size_t>(numel(x.dims)) * tessera_plugin::dtype_size(x.dtype);
  }

  // Whether the Quantize `op` makes an image (X held plain, 3 to 5 dims, at most kImageChannels channels) that no
  // op but int8 convolutions reads, each as its source, and that does not leave the region.
  bool image_for_int8_convs(const Op& op, const memory::desc& xmd) const {
    const Dims& d = p_.values[static_cast<size_t>(op.in[0])].dims;
    if (xmd != plain(op.in[0]) || d.size() < 3 || d.size() > 5 || d[1] > kImageChannels) return false;
    if (first_output_[static_cast<size_t>(op.out)] >= 0) return false;
    bool read = false;
    for (const Op& o : p_.ops) {
      for (size_t k = 0; k < o.in.size(); ++k) {
        if (o.in[k] != op.out) continue;
        if (o.kind != OpKind::kQConv || k != 0) return false;
        read = true;
      }
      for (const PostOp& po : o.post) {
        if (po.operand == op.out) return false;
      }
    }
    return read;
  }

  // An op the plugin runs itself, elementwise (a table lookup, a quantization, own_eltwise) over its operands in the
  // layout the first one is held in (a layout with padding is made plain first: the op would change the zeros oneDNN
  // keeps there); the result has that layout, in its own data type.
  void build_own(const Op& op, const std::string& what) {
    int x = canon(op.in[0]);
    if (!dense(op.in[0], plan_.mems[static_cast<size_t>(x)].md)) x = as_layout(op.in[0], plain(op.in[0]));
    if (op.kind == OpKind::kQuantParams) {  // a min and max over X in any layout; P is plain
      Step s = own_step(op, what);
      s.impl = "dynamic quantization parameters (own loop)";
      s.args.emplace_back(DNNL_ARG_SRC_0, x);
      const int dst = new_dst(op.out, plain(op.out));
      s.args.emplace_back(DNNL_ARG_DST, dst);
      add_step(std::move(s));
      bind(op.out, dst);
      return;
    }
    const memory::desc xmd = plan_.mems[static_cast<size_t>(x)].md;
    // X's layout in another data type (strides count elements, so the layout is the same).
    auto retyped = [&](int32_t v) {
      memory::desc md = xmd;
      md.data.data_type = static_cast<dnnl_data_type_t>(data_type_of(p_.values[static_cast<size_t>(v)].dtype));
      return md;
    };
    auto is_int8 = [&](int32_t v) { return p_.values[static_cast<size_t>(v)].dtype == TESSERA_DTYPE_INT8; };
    Step s = own_step(op, what);
    s.args.emplace_back(DNNL_ARG_SRC_0, x);
    if (op.kind == OpKind::kLookup) {
      const size_t t = op.in.size() - 1;
      s.impl = "lookup table (" + std::string(t == 2 ? "65536" : "256") + " entries)";
      s.flip0 = is_int8(op.in[0]) ? 0x80 : 0;
      if (t == 2) {
        s.args.emplace_back(DNNL_ARG_SRC_1, as_layout(op.in[1], retyped(op.in[1])));
        s.flip1 = is_int8(op.in[1]) ? 0x80 : 0;
        const auto form = tessera::qadd::form_of(op.floats);
        if (form && own_avx512_loops()) {  // elsewhere the table, as native does
          s.qadd = true;
          s.qform = *form;
          s.int8 = is_int8(op.in[0]);
          s.impl = std::string(s.qform.mul ? "QLinearMul" : "QLinearAdd") +
                   " arithmetic (own loop; its 65536-entry table checked)";
        }
      }
      s.table = plan_.mems[static_cast<size_t>(canon(op.in[t]))].index;
      // A QLinearAdd form is computed only where the operands and the table are of one type and the table holds it
      // at every pair (the table is the contract, whatever the blob says); otherwise the pairs are looked up. (A dry
      // plan, for sizes and estimates, has no constants to check.)
      const auto* tb = static_cast<const uint8_t*>(plan_.fixed[static_cast<size_t>(s.table)]);
      if (s.qadd && (is_int8(op.in[1]) != s.int8 || is_int8(op.in[2]) != s.int8 ||
                     (tb && !tessera::qadd::matches_table(s.qform, s.int8, tb)))) {
        s.qadd = false;
        s.impl = "lookup table (65536 entries)";
      }
    } else if (op.kind == OpKind::kDqBinary) {
      s.impl = "dequantize and binary (own loop)";
      s.args.emplace_back(DNNL_ARG_SRC_1, as_layout(op.in[1], retyped(op.in[1])));
      s.scale = op.floats[0], s.zero_point = op.floats[1], s.scale2 = op.floats[2], s.zero_point2 = op.floats[3];
      s.int8 = is_int8(op.in[0]), s.int8_2 = is_int8(op.in[1]);
      s.alg = op.alg;
      s.relu = !op.post.empty();
    } else if (op.kind == OpKind::kEltwise) {
      s.impl = std::string(op.alg == dnnl_eltwise_logistic    ? "logistic"
                           : op.alg == dnnl_eltwise_swish     ? "swish"
                           : op.alg == dnnl_eltwise_hardswish ? "hardswish"
                                                              : "linear") +
               " as ONNX Runtime computes it (own loop)";
      s.alg = op.alg;
      s.scale = op.floats[0];
      s.zero_point = op.floats[1];
    } else if (op.in.size() == 2) {  // DynamicQuantizeLinear's Y: the scale and zero point from P at run time
      s.impl = "dynamic quantize (own loop)";
      s.params = canon(op.in[1]);
    } else {
      const bool q = op.kind == OpKind::kQuantize;
      s.impl = q ? "quantize (own loop)" : "dequantize (own loop)";
      s.scale = op.floats[0];
      s.zero_point = op.floats[1];
      s.int8 = is_int8(q ? op.out : op.in[0]);
    }
    // A quantized image that only int8 convolutions read is written channels-last, the layout their kernels read,
    // by the quantizing loop itself: a reorder after it (mobilenet_v2's 3 x 224 x 224 input) took as long as the
    // quantization.
    s.to_channels_last = op.kind == OpKind::kQuantize && op.in.size() == 1 && image_for_int8_convs(op, xmd);
    // A table lookup or an own_eltwise writes over its first operand where that dies here (same bytes per element,
    // read before written): half the cache footprint of a fresh buffer.
    const memory::desc ymd =
        s.to_channels_last ? channels_last_md(p_.values[static_cast<size_t>(op.out)].dims, retyped(op.out).data_type())
                           : retyped(op.out);
    std::vector<int> others;
    for (const auto& [arg, m] : s.args) {
      if (arg != DNNL_ARG_SRC_0) others.push_back(m);
    }
    const int dst = (op.kind == OpKind::kLookup || op.kind == OpKind::kEltwise) &&
                            first_output_[static_cast<size_t>(op.out)] < 0 &&
                            can_alias(op.in[0], x, ymd, others)
                        ? alias_mem(x, ymd, op.out)
                        : new_dst(op.out, ymd);
    s.args.emplace_back(DNNL_ARG_DST, dst);
    add_step(std::move(s));
    bind(op.out, dst);
  }

  // kDynConv / kDynMatMul of uint8 weights W (dnnl_program.h): oneDNN convolves X with W - 128 and a channel of ones
  // into an int32 buffer [N, M + 1, ...] with channels innermost (a matmul: B - 128 and a column of ones, [rows, N +
  // 1]); the plugin's own loop (run_dyn_u8) finishes each output element from its channel and the window (row) sum.
  void build_dyn_u8(const Op& op, const std::string& what) {
    const bool conv = op.kind == OpKind::kDynConv;
    const Dims& wd = p_.values[static_cast<size_t>(op.in[1])].dims;
    const int64_t m = conv ? wd[0] : wd[1], k = numel(wd) / m;  // outputs, and the weights each one reads
    Dims wd1 = wd;
    ++wd1[conv ? 0 : 1];
    const memory::desc wmd = plain_md(wd1, memory::data_type::s8);
    const int w8 = own_constant(wmd, [&](void* to) {
      const auto* w = static_cast<const uint8_t*>(constant_ptr(static_cast<size_t>(op.in[1])));
      auto* q = static_cast<int8_t*>(to);
      auto shifted = [](uint8_t v) { return static_cast<int8_t>(static_cast<int32_t>(v) - 128); };
      if (conv) {  // [M + 1, C, k...]: the last output channel all ones
        for (int64_t i = 0; i < m * k; ++i) q[i] = shifted(w[i]);
        std::fill_n(q + m * k, k, int8_t{1});
      } else {  // [K, N + 1]: the last column all ones
        for (int64_t r = 0; r < k; ++r) {
          for (int64_t j = 0; j < m; ++j) q[r * (m + 1) + j] = shifted(w[r * m + j]);
          q[r * (m + 1) + m] = 1;
        }
      }
    });
    std::optional<dnnl::primitive_desc_base> pd;
    if (conv) {
      try {  // the source as it is held, else in the layout the convolution prefers
        pd = dyn_u8_pd(op, p_.values, plan_.mems[static_cast<size_t>(canon(op.in[0]))].md, eng_);
        if (std::string(pd->impl_info_str()).rfind("ref", 0) == 0) pd.reset();
      } catch (const dnnl::error&) {
      }
    }
    if (!pd) pd = dyn_u8_pd(op, p_.values, dyn_u8_src_md(op, p_.values), eng_);
    const memory::desc src_md = pd->query_md(dnnl::query::exec_arg_md, DNNL_ARG_SRC);
    const int x = conv ? as_layout(op.in[0], src_md) : as_view(op.in[0], src_md);
    const int w = convert_constant(w8, pd->query_md(dnnl::query::exec_arg_md, DNNL_ARG_WEIGHTS));
    const memory::desc acc_md = pd->query_md(dnnl::query::exec_arg_md, DNNL_ARG_DST);
    const int acc = arena_mem(acc_md, op.out);
    Step prim;
    prim.what = what;
    prim.nodes = op.nodes;
    prim.impl = std::string(conv ? "convolution " : "matmul ") + pd->impl_info_str();
    prim.args = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, acc}};
    prim.scratchpad = pd->scratchpad_desc();
    prim.params = canon(op.in[2]);
    if (!dry_) prim.prim = dnnl::primitive(pd->get());
    add_step(std::move(prim));
    // The result: the accumulators' layout without the extra channel (column), in float32.
    const memory::desc ymd = conv ? channels_last_md(pd_dims(op.out)) : plain(op.out);
    Step fin = own_step(op, what);
    fin.impl = "weight zero points and scale (own loop)";
    fin.params = canon(op.in[2]);
    fin.w_scales.assign(op.floats.begin(), op.floats.begin() + m);
    for (int64_t j = 0; j < m; ++j) fin.w_offsets.push_back(128 - static_cast<int32_t>(op.floats[static_cast<size_t>(m + j)]));
    const int y = new_dst(op.out, ymd);
    fin.args = {{DNNL_ARG_SRC_0, acc}, {DNNL_ARG_DST, y}};
    for (const PostOp& po : op.post) {  // dyn_u8_post_ops: a bias per output (plain), a relu
      if (po.kind == PostKind::kBinary) fin.args.emplace_back(DNNL_ARG_SRC_1, as_view(po.operand, plain(po.operand)));
      if (po.kind == PostKind::kEltwise) fin.relu = true;
    }
    add_step(std::move(fin));
    bind(op.out, y);
  }

  memory::dims pd_dims(int32_t v) const { return p_.values[static_cast<size_t>(v)].dims; }

  // Concat `op` whose buffer its operands' producers started: the operands
  // not written in place are reordered into their slices; no primitive.
  void build_concat_in_place(const Op& op) {
    for (size_t k = 0; k < op.in.size(); ++k) {
      const auto v = static_cast<size_t>(op.in[k]);
      if (in_place_[v] && slice_of_[v] == static_cast<int>(op_) && slice_pos_[v] == static_cast<int>(k)) continue;
      reorder_step(canon(op.in[k]), slice_mem(op_, k),
                   "'" + p_.values[v].name + "' into Concat '" + nodes_str(op) + "'");
    }
    bind(op.out, concat_mem_[static_cast<size_t>(op.out)]);
    plan_.free_steps.push_back(FreeStep{plan_.steps.size(), op.nodes, "concat in place (no work)"});
  }

  const Program& p_;
  const dnnl::engine& eng_;
  const std::map<std::string, const tessera_tensor_t*>* consts_;
  const bool dry_;
  const int threads_;
  dnnl::stream stream_;
  Plan plan_;
  std::vector<std::vector<int>> variants_;
  std::vector<int> canon_, last_use_, first_output_;
  std::vector<std::vector<int32_t>> buffer_values_;
  // Concats built in place: per value, the Concat op it is a slice of and
  // its operand position (-1: none), whether its producer wrote it there;
  // per Concat value, the Mem of its whole buffer (-1: not started).
  std::vector<int> slice_of_, slice_pos_, concat_mem_;
  std::vector<bool> in_place_;
  size_t op_ = 0;
};

}  // namespace

Plan build_plan(const Program& p, const dnnl::engine& eng,
                const std::map<std::string, const tessera_tensor_t*>* constants, int num_threads) {
  // Kernels are generated for the thread count they will run with.
  omp_set_num_threads(std::max(1, num_threads));
  return Builder(p, eng, constants, std::max(1, num_threads)).build();
}

}  // namespace tessera_dnnl
