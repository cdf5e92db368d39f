#include "partition/tune.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_map>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace tessera::partition {

namespace {

// ---- region key ----------------------------------------------------------

// Constants with at most this many elements are part of the key by value:
// they are axes, shapes, scales — what changes the work, unlike weights.
constexpr int64_t kSmallConstant = 16;

class KeyWriter {
 public:
  explicit KeyWriter(std::ostringstream& os) : os_(os) {}

  void graph(const Graph& g) {
    for (const auto& in : g.inputs) os_ << "in " << value(g, in) << ";";
    for (const Node& n : g.nodes) {
      os_ << n.domain << "::" << n.op_type << "(";
      for (const auto& v : n.inputs) os_ << value(g, v) << ",";
      os_ << ")->(";
      for (const auto& v : n.outputs) os_ << value(g, v) << ",";
      os_ << ")";
      std::vector<std::string> names;
      for (const auto& kv : n.attrs) names.push_back(kv.first);
      std::sort(names.begin(), names.end());
      for (const auto& a : names) attribute(a, n.attrs.at(a));
      os_ << ";";
    }
    for (const auto& out : g.outputs) os_ << "out " << value(g, out) << ";";
  }

 private:
  // A value's canonical id (order of first appearance), with its type; a
  // constant's dims, and its data when small.
  std::string value(const Graph& g, const std::string& v) {
    if (v.empty()) return "-";
    auto it = ids_.find(v);
    if (it != ids_.end()) return it->second;
    std::ostringstream s;
    s << "v" << ids_.size();
    if (const Tensor* t = g.constant(v)) {
      s << ":c" << static_cast<int>(t->dtype()) << dims_str(t->dims());
      if (t->numel() <= kSmallConstant) tensor_bytes(s, *t);
    } else if (const ValueInfo* vi = g.info(v)) {
      s << ":" << static_cast<int>(vi->dtype) << vi->shape.str();
    }
    return ids_[v] = s.str();
  }

  static void tensor_bytes(std::ostringstream& s, const Tensor& t) {
    s << "=";
    const auto* p = static_cast<const unsigned char*>(t.raw());
    char hex[3];
    for (size_t i = 0; i < t.nbytes(); ++i) {
      std::snprintf(hex, sizeof(hex), "%02x", p[i]);
      s << hex;
    }
  }

  void attribute(const std::string& name, const Attribute& a) {
    os_ << " " << name << "=" << static_cast<int>(a.kind) << ":";
    switch (a.kind) {
      case Attribute::Kind::kFloat: os_ << a.f; break;
      case Attribute::Kind::kInt: os_ << a.i; break;
      case Attribute::Kind::kString: os_ << a.s.size() << "'" << a.s; break;
      case Attribute::Kind::kTensor:
        os_ << static_cast<int>(a.t.dtype()) << dims_str(a.t.dims());
        if (a.t.numel() <= kSmallConstant) tensor_bytes(os_, a.t);
        break;
      case Attribute::Kind::kGraph:
        if (a.g) nested(*a.g);
        break;
      case Attribute::Kind::kFloats:
        for (float f : a.floats) os_ << f << ",";
        break;
      case Attribute::Kind::kInts:
        for (int64_t i : a.ints) os_ << i << ",";
        break;
      case Attribute::Kind::kStrings:
        for (const auto& s : a.strings) os_ << s.size() << "'" << s << ",";
        break;
      case Attribute::Kind::kTensors:
        for (const auto& t : a.tensors) os_ << static_cast<int>(t.dtype()) << dims_str(t.dims()) << ",";
        break;
      case Attribute::Kind::kGraphs:
        for (const auto& g : a.graphs) {
          if (g) nested(*g);
        }
        break;
    }
  }

  void nested(const Graph& g) {
    os_ << "{";
    KeyWriter inner(os_);
    inner.graph(g);
    os_ << "}";
  }

  std::ostringstream& os_;
  std::unordered_map<std::string, std::string> ids_;
};

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- measurement ---------------------------------------------------------

Tensor random_tensor(DType dtype, const Dims& dims, std::mt19937& rng) {
  Tensor t(dtype, dims);
  if (dtype == DType::kFloat32) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  }
  // Other dtypes stay zero: valid indices and conditions for any op.
  return t;
}

}  // namespace

std::string region_key(const Graph& rg) {
  std::ostringstream os;
  KeyWriter(os).graph(rg);
  const std::string canonical = os.str();
  // Two independent 64-bit FNV-1a digests: 128 bits against collisions.
  char hex[40];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx",
                static_cast<unsigned long long>(fnv1a(canonical, 14695981039346656037ull)),
                static_cast<unsigned long long>(fnv1a(canonical, 0x9ae16a3b2f90404full)));
  return hex;
}

std::string default_tune_cache_path() {
  if (const char* p = std::getenv("TESSERA_TUNE_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "tessera" / "tune.json").string();
  if (const char* h = std::getenv("HOME"); h && *h) {
    return (fs::path(h) / ".cache" / "tessera" / "tune.json").string();
  }
  return "";
}

namespace {

constexpr int kFormatVersion = 2;

nlohmann::json machine_json(const MachineProfile& m) {
  nlohmann::json j;
  j["cpu"] = m.cpu;
  j["isa"] = m.isa;
  j["cores"] = m.cores;
  j["threads"] = m.threads;
  j["peak_gflops"] = m.peak_gflops;
  j["gemm_gflops"] = m.gemm_gflops;
  j["bandwidth_gbps"] = m.bandwidth_gbps;
  j["wake_us"] = m.wake_us;
  j["clock_ghz"] = m.clock_ghz;
  j["launch_us"] = m.launch_us;
  j["handoff_us"] = m.handoff_us;
  return j;
}

bool is_number_map(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_number()) return false;
  }
  return true;
}

// A calibration from the file; false when any field is missing or mistyped.
bool machine_from_json(const nlohmann::json& j, MachineProfile* m) {
  if (!j.is_object()) return false;
  for (const char* k : {"cpu", "isa"}) {
    if (!j.contains(k) || !j[k].is_string()) return false;
  }
  for (const char* k : {"cores", "threads"}) {
    if (!j.contains(k) || !j[k].is_number_integer()) return false;
  }
  for (const char* k : {"peak_gflops", "gemm_gflops", "bandwidth_gbps", "wake_us", "clock_ghz"}) {
    if (!j.contains(k) || !j[k].is_number() || !(j[k].get<double>() > 0)) return false;
  }
  for (const char* k : {"launch_us", "handoff_us"}) {
    if (!j.contains(k) || !is_number_map(j[k])) return false;
  }
  m->cpu = j["cpu"].get<std::string>();
  m->isa = j["isa"].get<std::string>();
  m->cores = j["cores"].get<int>();
  m->threads = j["threads"].get<int>();
  m->peak_gflops = j["peak_gflops"].get<double>();
  m->gemm_gflops = j["gemm_gflops"].get<double>();
  m->bandwidth_gbps = j["bandwidth_gbps"].get<double>();
  m->wake_us = j["wake_us"].get<double>();
  m->clock_ghz = j["clock_ghz"].get<double>();
  m->launch_us = j["launch_us"].get<std::map<std::string, double>>();
  m->handoff_us = j["handoff_us"].get<std::map<std::string, double>>();
  m->measured = true;
  return true;
}

struct FileContents {
  std::map<std::string, nlohmann::json> entries;   // validated
  std::map<std::string, MachineProfile> machines;  // validated
  std::map<std::string, std::string> verdicts;     // validated
};

// Reads and validates a cache file. A missing file is empty and fine;
// anything else wrong returns false (the caller warns and replaces it).
bool read_cache_file(const std::string& path, FileContents* out) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return true;
  // Every field is type-checked before it is read: json's value() and get()
  // throw on a wrong type, and a damaged cache must only be ignored.
  nlohmann::json j;
  if (fs::is_regular_file(path, ec)) {
    std::ifstream f(path, std::ios::binary);
    j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  }
  bool ok = j.is_object() && j.contains("format") && j["format"] == "tessera-tune" && j.contains("version") &&
            j["version"] == kFormatVersion && j.contains("entries") && j["entries"].is_object() &&
            (!j.contains("machines") || j["machines"].is_object()) &&
            (!j.contains("verdicts") || j["verdicts"].is_object());
  if (!ok) return false;
  for (const auto& [k, v] : j["entries"].items()) {
    if (!(v.is_object() && v.contains("us") && v["us"].is_number() && v["us"].get<double>() >= 0 &&
          (!v.contains("runs") || v["runs"].is_number_integer()))) {
      return false;
    }
    out->entries[k] = v;
  }
  if (j.contains("machines")) {
    for (const auto& [k, v] : j["machines"].items()) {
      MachineProfile m;
      if (!machine_from_json(v, &m)) return false;
      out->machines[k] = std::move(m);
    }
  }
  if (j.contains("verdicts")) {
    for (const auto& [k, v] : j["verdicts"].items()) {
      if (!v.is_string()) return false;
      out->verdicts[k] = v.get<std::string>();
    }
  }
  return true;
}

// An exclusive advisory lock on PATH.lock for as long as it lives.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace

TuneCache TuneCache::Open(const std::string& path, std::string* warning) {
  TuneCache c;
  c.path_ = path;
  if (path.empty()) return c;
  FileContents fc;
  if (!read_cache_file(path, &fc)) {
    c.rewrite_ = true;  // replaced on save
    if (warning) *warning = "tune cache '" + path + "' is not a tessera tune cache (format version 2); ignoring it";
    return c;
  }
  for (const auto& [k, v] : fc.entries) {
    c.entries_[k] = Entry{v["us"].get<double>(), v.contains("runs") ? v["runs"].get<int>() : 0, true};
  }
  c.machines_ = std::move(fc.machines);
  c.verdicts_ = std::move(fc.verdicts);
  return c;
}

std::string TuneCache::entry_key(const std::string& region, const Backend& b, const std::string& machine) {
  return region + "|" + b.name() + "|" + b.version() + "|" + machine;
}

std::optional<TuneCache::Hit> TuneCache::get(const std::string& region, const Backend& b,
                                             const std::string& machine) const {
  auto it = entries_.find(entry_key(region, b, machine));
  if (it == entries_.end()) return std::nullopt;
  return Hit{it->second.us, it->second.from_file};
}

void TuneCache::put(const std::string& region, const Backend& b, const std::string& machine, double us, int runs) {
  const std::string k = entry_key(region, b, machine);
  entries_[k] = Entry{us, runs, false};
  added_[k] = Entry{us, runs, false};
}

std::optional<MachineProfile> TuneCache::machine(const std::string& key) const {
  auto it = machines_.find(key);
  if (it == machines_.end()) return std::nullopt;
  return it->second;
}

void TuneCache::put_machine(const MachineProfile& m) {
  machines_[m.key()] = m;
  added_machines_[m.key()] = m;
}

std::optional<std::string> TuneCache::verdict(const std::string& key) const {
  auto it = verdicts_.find(key);
  if (it == verdicts_.end()) return std::nullopt;
  return it->second;
}

void TuneCache::put_verdict(const std::string& key, const std::string& plan) {
  verdicts_[key] = plan;
  added_verdicts_[key] = plan;
}

Status TuneCache::save() {
  if (path_.empty() || (added_.empty() && added_machines_.empty() && added_verdicts_.empty() && !rewrite_)) {
    return Status::Ok();
  }
  std::error_code ec;
  fs::path p(path_);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  FileLock lock(path_);
  if (!lock.ok()) return InvalidInput("cannot write tune cache '" + path_ + "' (is its directory writable?)");
  // What other processes saved since Open, then ours on top.
  FileContents now;
  if (!read_cache_file(path_, &now)) now = FileContents{};
  nlohmann::json j;
  j["format"] = "tessera-tune";
  j["version"] = kFormatVersion;
  nlohmann::json entries = nlohmann::json::object();
  for (auto& [k, v] : now.entries) entries[k] = std::move(v);
  for (const auto& [k, e] : added_) entries[k] = {{"us", e.us}, {"runs", e.runs}};
  j["entries"] = std::move(entries);
  nlohmann::json machines = nlohmann::json::object();
  for (const auto& [k, m] : now.machines) machines[k] = machine_json(m);
  for (const auto& [k, m] : added_machines_) machines[k] = machine_json(m);
  j["machines"] = std::move(machines);
  nlohmann::json verdicts = nlohmann::json::object();
  for (const auto& [k, v] : now.verdicts) verdicts[k] = v;
  for (const auto& [k, v] : added_verdicts_) verdicts[k] = v;
  j["verdicts"] = std::move(verdicts);
  std::string tmp = path_ + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << j.dump(1) << "\n";
    if (!f) {
      fs::remove(tmp, ec);
      return InvalidInput("cannot write tune cache '" + path_ + "' (is its directory writable?)");
    }
  }
  fs::rename(tmp, path_, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return InvalidInput("cannot write tune cache '" + path_ + "'");
  }
  added_.clear();
  added_machines_.clear();
  added_verdicts_.clear();
  rewrite_ = false;
  return Status::Ok();
}

double MeasureBudget::now() const {
  if (clock) return clock();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Expected<Measurement> measure_region(const Backend& b, const Graph& rg, const std::string& model,
                                     const std::string& options, int threads, Blob* blob, const MeasureSpec& spec) {
  Blob compiled;
  TSR_ASSIGN_OR_RETURN(compiled, b.compile(model, options, threads));
  std::vector<std::pair<std::string, Tensor>> consts(rg.constants.begin(), rg.constants.end());
  std::shared_ptr<const Engine> engine;
  TSR_ASSIGN_OR_RETURN(engine, b.load(compiled, consts, threads, "tuning region on " + b.name()));
  if (blob) *blob = compiled;

  std::mt19937 rng(20261130);
  std::vector<Tensor> ins, outs;
  for (const auto& name : rg.inputs) {
    const ValueInfo* vi = rg.info(name);
    if (!vi || !vi->shape.fully_known()) return Unsupported("input '" + name + "' has no concrete shape");
    ins.push_back(random_tensor(vi->dtype, vi->shape.concrete(), rng));
  }
  for (const auto& name : rg.outputs) {
    const ValueInfo* vi = rg.info(name);
    if (!vi || !vi->shape.fully_known()) return Unsupported("output '" + name + "' has no concrete shape");
    outs.emplace_back(vi->dtype, vi->shape.concrete());
  }
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  for (auto& t : ins) in_ptrs.push_back(&t);
  for (auto& t : outs) out_ptrs.push_back(&t);

  using clock = std::chrono::steady_clock;
  auto us_since = [](clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(clock::now() - t0).count();
  };
  // Warm up until the engine's threads, scratch memory and caches have
  // settled, and the machine with them: the first milliseconds after other
  // heavy work (another engine's runs, the calibration's FMA loop) can run 5x
  // slower. At least the spec's runs and time, then until a run comes within
  // 1.3x of the best warm-up run, for at most 200 runs or 10x the spec's time.
  const auto warm_start = clock::now();
  double warm_best = 0;
  for (int i = 0;; ++i) {
    if (i >= 200 || (i > 0 && us_since(warm_start) > 10 * std::max(1e3, spec.warmup_us))) break;
    auto t0 = clock::now();
    TSR_RETURN_IF_ERROR(engine->run(in_ptrs, out_ptrs));
    const double t = us_since(t0);
    warm_best = i == 0 ? t : std::min(warm_best, t);
    const bool settled = i + 1 >= spec.warmup_runs && us_since(warm_start) >= spec.warmup_us && t <= 1.3 * warm_best;
    // A run this slow past the first (which may set things up) cannot win.
    if (i > 0 && spec.give_up_us > 0 && t > spec.give_up_us) return Measurement{t, 1, true};
    if (i == 0 && spec.give_up_us > 0 && t > 4 * spec.give_up_us) {
      auto t1 = clock::now();
      TSR_RETURN_IF_ERROR(engine->run(in_ptrs, out_ptrs));
      const double again = us_since(t1);
      if (again > spec.give_up_us) return Measurement{again, 1, true};
    }
    if (settled) break;
  }
  // Interference from the rest of the process only ever adds time, so the
  // lower quartile ranks engines more steadily than the median.
  std::vector<double> times;
  const auto start = clock::now();
  while (static_cast<int>(times.size()) < spec.min_runs ||
         (us_since(start) < spec.min_us && times.size() < 200)) {
    auto t0 = clock::now();
    TSR_RETURN_IF_ERROR(engine->run(in_ptrs, out_ptrs));
    times.push_back(us_since(t0));
    if (spec.give_up_us > 0 && times.back() > spec.give_up_us && times.size() >= 2) break;
    if (us_since(start) > spec.max_us) break;
  }
  std::sort(times.begin(), times.end());
  return Measurement{times[times.size() / 4], static_cast<int>(times.size())};
}

}  // namespace tessera::partition
