// The .tsr container: writing the header, section table and sections, and
// mapping + validating them on read.
//
// Input (write): sections as byte pieces. Output: a file whose every byte is
// either covered by a checksum or required to be zero.
// Input (read): a path. Output: a mapping whose header, table, section bounds,
// alignment, order, gaps and checksums have all been checked, in an order
// that never reads a byte before its bounds are known to lie inside the file.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "artifact/artifact.h"
#include "artifact/artifact_format.h"
#include "artifact/crc32c.h"

namespace tessera::artifact {

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

const uint8_t kZeros[4096] = {};

uint32_t crc_zeros(uint64_t n, uint32_t crc) {
  while (n) {
    size_t k = n < sizeof kZeros ? static_cast<size_t>(n) : sizeof kZeros;
    crc = crc32c(kZeros, k, crc);
    n -= k;
  }
  return crc;
}

// Bytes of a section in file order: pieces with zero gaps. Calls
// emit(data, size) with data == nullptr for zeros.
template <class Emit>
Status for_each_span(const OutSection& s, Emit&& emit) {
  uint64_t at = 0;
  for (const auto& p : s.pieces) {
    if (p.offset < at || p.size > s.size || p.offset > s.size - p.size) {
      return InternalError("artifact writer: section pieces overlap or exceed the section");
    }
    if (p.offset > at) TSR_RETURN_IF_ERROR(emit(nullptr, p.offset - at));
    if (p.size) TSR_RETURN_IF_ERROR(emit(p.data, p.size));
    at = p.offset + p.size;
  }
  if (s.size > at) TSR_RETURN_IF_ERROR(emit(nullptr, s.size - at));
  return Status::Ok();
}

// Where a container's bytes go: a file, or memory.
class Writer {
 public:
  virtual ~Writer() = default;
  // Writes n bytes of data, or n zero bytes when data is null.
  Status write(const void* data, uint64_t n) {
    if (!data) {
      while (n) {
        size_t k = n < sizeof kZeros ? static_cast<size_t>(n) : sizeof kZeros;
        TSR_RETURN_IF_ERROR(put(kZeros, k));
        n -= k;
        written_ += k;
      }
      return Status::Ok();
    }
    if (n) TSR_RETURN_IF_ERROR(put(data, static_cast<size_t>(n)));
    written_ += n;
    return Status::Ok();
  }
  uint64_t written() const { return written_; }

 protected:
  virtual Status put(const void* data, size_t n) = 0;

 private:
  uint64_t written_ = 0;
};

class FileWriter final : public Writer {
 public:
  explicit FileWriter(std::FILE* f) : f_(f) {}

 private:
  Status put(const void* data, size_t n) override {
    if (std::fwrite(data, 1, n, f_) != n) return IoError(std::strerror(errno));
    return Status::Ok();
  }
  std::FILE* f_;
};

class StringWriter final : public Writer {
 public:
  explicit StringWriter(std::string* out) : out_(out) {}

 private:
  Status put(const void* data, size_t n) override {
    out_->append(static_cast<const char*>(data), n);
    return Status::Ok();
  }
  std::string* out_;
};

// The header and section table of a container of `sections`, and where each section goes.
struct Layout {
  uint8_t header[kHeaderSize] = {};
  std::vector<uint8_t> table;
  std::vector<uint64_t> offsets;
};

Status lay_out(const std::vector<OutSection>& sections, uint32_t min_version, Layout* l) {
  if (sections.size() > kMaxSections) return InternalError("artifact writer: too many sections");
  const uint64_t table_offset = kHeaderSize;
  uint64_t cursor = table_offset + sections.size() * kEntrySize;
  l->table.assign(sections.size() * kEntrySize, 0);
  for (size_t i = 0; i < sections.size(); ++i) {
    const OutSection& s = sections[i];
    uint64_t offset = align_up(cursor, s.alignment);
    uint32_t crc = 0;
    TSR_RETURN_IF_ERROR(for_each_span(s, [&](const void* d, uint64_t n) {
      crc = d ? crc32c(d, static_cast<size_t>(n), crc) : crc_zeros(n, crc);
      return Status::Ok();
    }));
    uint8_t* e = l->table.data() + i * kEntrySize;
    put_u32(e + kEntKind, static_cast<uint32_t>(s.kind));
    put_u32(e + kEntAlignment, s.alignment);
    put_u64(e + kEntOffset, offset);
    put_u64(e + kEntSize, s.size);
    put_u32(e + kEntCrc, crc);
    l->offsets.push_back(offset);
    cursor = offset + s.size;
  }
  const uint64_t file_size = cursor;
  uint8_t* header = l->header;
  std::memcpy(header + kOffMagic, kMagic, sizeof kMagic);
  const bool buckets = std::any_of(sections.begin(), sections.end(),
                                  [](const OutSection& s) { return s.kind == SectionKind::kBucket; });
  put_u32(header + kOffVersion, std::max<uint32_t>(min_version, buckets ? 2 : kArtifactFormatVersionMin));
  put_u32(header + kOffSectionCount, static_cast<uint32_t>(sections.size()));
  put_u64(header + kOffFileSize, file_size);
  put_u64(header + kOffTableOffset, table_offset);
  put_u32(header + kOffEntrySize, static_cast<uint32_t>(kEntrySize));
  put_u32(header + kOffTableCrc, crc32c(l->table.data(), l->table.size()));
  put_u32(header + kOffHeaderCrc, crc32c(header, kOffHeaderCrc));
  return Status::Ok();
}

Status emit(const Layout& l, const std::vector<OutSection>& sections, Writer& w) {
  Status st = w.write(l.header, kHeaderSize);
  if (st.ok()) st = w.write(l.table.data(), l.table.size());
  for (size_t i = 0; i < sections.size() && st.ok(); ++i) {
    st = w.write(nullptr, l.offsets[i] - w.written());
    if (st.ok()) st = for_each_span(sections[i], [&](const void* d, uint64_t n) { return w.write(d, n); });
  }
  return st;
}

}  // namespace

const char* section_kind_name(uint32_t kind) {
  switch (static_cast<SectionKind>(kind)) {
    case SectionKind::kMeta:
      return "META";
    case SectionKind::kGraph:
      return "GRAPH";
    case SectionKind::kConstants:
      return "CONSTANTS";
    case SectionKind::kEngine:
      return "ENGINE";
    case SectionKind::kBucket:
      return "BUCKET";
  }
  return "UNKNOWN";
}

bool section_kind_known(uint32_t kind) {
  return kind >= static_cast<uint32_t>(SectionKind::kMeta) && kind <= static_cast<uint32_t>(SectionKind::kBucket);
}

Status corrupt(const std::string& path, const std::string& where, const std::string& what) {
  return InvalidModel("artifact '" + path + "': " + where + ": " + what);
}

Status write_container(const std::string& path, const std::vector<OutSection>& sections, uint32_t min_version) {
  Layout layout;
  TSR_RETURN_IF_ERROR(lay_out(sections, min_version, &layout));

  // Written beside the target and renamed over it, so a reader never sees a
  // half-written artifact and a failed write leaves the old file in place.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return IoError("artifact '" + path + "': cannot create '" + tmp + "': " + std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return IoError("artifact '" + path + "': cannot write: " + std::strerror(errno));
  }
  FileWriter w(f);
  Status st = emit(layout, sections, w);
  if (std::fclose(f) != 0 && st.ok()) st = IoError(std::strerror(errno));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = IoError(std::strerror(errno));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    if (st.code() == ErrorCode::kIo) return IoError("artifact '" + path + "': cannot write: " + st.message());
  }
  return st;
}

Expected<std::string> write_container_bytes(const std::vector<OutSection>& sections, uint32_t min_version) {
  Layout layout;
  TSR_RETURN_IF_ERROR(lay_out(sections, min_version, &layout));
  std::string out;
  StringWriter w(&out);
  TSR_RETURN_IF_ERROR(emit(layout, sections, w));
  return out;
}

namespace {
// Checks a mapped or copied container (c.path names it, c.base / c.file_size
// hold its bytes) and fills in its sections.
Expected<Container> validate_container(Container c);
}  // namespace

Expected<Container> container_from_bytes(const std::string& name, const void* data, size_t size) {
  if (size < kHeaderSize) {
    return corrupt(name, "header",
                   "the buffer is " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kHeaderSize) +
                       "-byte header");
  }
  // A private copy at page alignment: the sections' alignment (constants at 64 bytes) is relative to the start, and
  // the caller may free its buffer.
  const size_t alloc = (size + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, alloc);
  if (!p) return IoError("artifact '" + name + "': out of memory for " + std::to_string(size) + " bytes");
  std::memcpy(p, data, size);
  Container c;
  c.path = name;
  c.mapping = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  c.base = static_cast<const uint8_t*>(p);
  c.file_size = size;
  return validate_container(std::move(c));
}

Expected<Container> open_container(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("artifact '" + path + "': cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError("artifact '" + path + "': not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderSize) {
    ::close(fd);
    return corrupt(path, "header",
                   "the file is " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kHeaderSize) +
                       "-byte header");
  }
  // Private and writable: the file is open read-only so it can never change,
  // and a caller that writes into a constant (or a run output aliasing one)
  // gets a private copy of that page instead of a SIGSEGV. Untouched pages
  // stay shared with the page cache.
  void* addr = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED) return IoError("artifact '" + path + "': cannot map: " + std::strerror(errno));
  ::madvise(addr, static_cast<size_t>(size), MADV_WILLNEED);

  Container c;
  c.path = path;
  c.mapping = std::shared_ptr<void>(addr, [size](void* p) { ::munmap(p, static_cast<size_t>(size)); });
  c.base = static_cast<const uint8_t*>(addr);
  c.file_size = size;
  return validate_container(std::move(c));
}

namespace {
Expected<Container> validate_container(Container c) {
  const std::string& path = c.path;
  const uint64_t size = c.file_size;
  const uint8_t* h = c.base;

  // Magic, then version, then checksum: a later format may move anything
  // after the version, so its files must be named as such, not as corrupt.
  if (std::memcmp(h + kOffMagic, kMagic, sizeof kMagic) != 0) {
    return corrupt(path, "header", "not a Tessera artifact (bad magic)");
  }
  c.version = get_u32(h + kOffVersion);
  if (c.version < kArtifactFormatVersionMin || c.version > kArtifactFormatVersion) {
    return Unsupported("artifact '" + path + "': format version " + std::to_string(c.version) +
                       " is not supported (this build reads " + std::to_string(kArtifactFormatVersionMin) + "-" +
                       std::to_string(kArtifactFormatVersion) + ")");
  }
  uint32_t stored = get_u32(h + kOffHeaderCrc), computed = crc32c(h, kOffHeaderCrc);
  if (stored != computed) {
    return corrupt(path, "header",
                   "checksum mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) + ")");
  }
  for (size_t i = kOffReserved; i < kOffHeaderCrc; ++i) {
    if (h[i] != 0) return corrupt(path, "header", "reserved byte " + std::to_string(i) + " is not zero");
  }
  const uint64_t recorded = get_u64(h + kOffFileSize);
  if (recorded != size) {
    return corrupt(path, "header",
                   "records a file of " + std::to_string(recorded) + " bytes but the file has " + std::to_string(size) +
                       " (truncated or appended to)");
  }
  if (get_u32(h + kOffEntrySize) != kEntrySize) {
    return corrupt(path, "header",
                   "section entry size " + std::to_string(get_u32(h + kOffEntrySize)) + " (version 1 uses " +
                       std::to_string(kEntrySize) + ")");
  }
  const uint32_t count = get_u32(h + kOffSectionCount);
  if (count > kMaxSections) return corrupt(path, "header", "section count " + std::to_string(count) + " is too large");
  c.table_offset = get_u64(h + kOffTableOffset);
  const uint64_t table_bytes = uint64_t{count} * kEntrySize;
  if (c.table_offset < kHeaderSize || c.table_offset % 8 != 0 || c.table_offset > size ||
      table_bytes > size - c.table_offset) {
    return corrupt(path, "section table",
                   "offset " + std::to_string(c.table_offset) + " with " + std::to_string(count) +
                       " entries does not fit in the file");
  }
  const uint8_t* table = c.base + c.table_offset;
  stored = get_u32(h + kOffTableCrc);
  computed = crc32c(table, static_cast<size_t>(table_bytes));
  if (stored != computed) {
    return corrupt(path, "section table",
                   "checksum mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) + ")");
  }

  // Every byte outside the header, the table and the sections must be zero,
  // so that no byte of the file escapes checking.
  auto check_zero = [&](uint64_t from, uint64_t to, const std::string& where) -> Status {
    for (uint64_t i = from; i < to; ++i) {
      if (c.base[i] != 0) return corrupt(path, where, "padding byte at offset " + std::to_string(i) + " is not zero");
    }
    return Status::Ok();
  };
  TSR_RETURN_IF_ERROR(check_zero(kHeaderSize, c.table_offset, "padding before the section table"));
  uint64_t cursor = c.table_offset + table_bytes;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = table + uint64_t{i} * kEntrySize;
    SectionInfo s;
    s.kind = get_u32(e + kEntKind);
    s.alignment = get_u32(e + kEntAlignment);
    s.offset = get_u64(e + kEntOffset);
    s.size = get_u64(e + kEntSize);
    s.crc = get_u32(e + kEntCrc);
    const std::string where = "section " + std::to_string(i) + " (" + section_kind_name(s.kind) + ")";
    if (!section_kind_known(s.kind) || (s.kind == static_cast<uint32_t>(SectionKind::kBucket) && c.version < 2)) {
      return corrupt(path, where, "unknown section kind " + std::to_string(s.kind) + " in format " +
                                      std::to_string(c.version));
    }
    if (get_u32(e + kEntReserved) != 0) return corrupt(path, where, "reserved field is not zero");
    if (s.alignment < kSectionAlignment || (s.alignment & (s.alignment - 1)) != 0) {
      return corrupt(path, where, "alignment " + std::to_string(s.alignment) + " is not a power of two >= 64");
    }
    if (s.offset > size) {
      return corrupt(
          path, where,
          "offset " + std::to_string(s.offset) + " is past the end of the file (" + std::to_string(size) + " bytes)");
    }
    if (s.size > size - s.offset) {  // s.offset + s.size could wrap
      return corrupt(path, where,
                     "size " + std::to_string(s.size) + " at offset " + std::to_string(s.offset) +
                         " runs past the end of the file (" + std::to_string(size) + " bytes)");
    }
    if (s.offset % s.alignment != 0) {
      return corrupt(path, where,
                     "offset " + std::to_string(s.offset) + " is not " + std::to_string(s.alignment) + "-byte aligned");
    }
    if (s.offset < cursor) {
      return corrupt(path, where,
                     "overlaps the section table or the previous section (sections must be in file order)");
    }
    TSR_RETURN_IF_ERROR(check_zero(cursor, s.offset, "padding before " + where));
    s.data = c.base + s.offset;
    computed = crc32c(s.data, static_cast<size_t>(s.size));
    if (computed != s.crc) {
      return corrupt(path, where, "checksum mismatch (stored " + hex32(s.crc) + ", computed " + hex32(computed) + ")");
    }
    cursor = s.offset + s.size;
    c.sections.push_back(s);
  }
  TSR_RETURN_IF_ERROR(check_zero(cursor, size, "padding after the last section"));
  return c;
}
}  // namespace

}  // namespace tessera::artifact
