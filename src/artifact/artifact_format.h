// The binary container of a .tsr file (docs/artifact.md has the byte tables):
// a 64-byte header, a table of 32-byte section entries, and the sections.
// Everything a reader trusts is covered: the header and the table by their own
// CRC-32C, each section by its entry's CRC-32C, and every byte between them
// must be zero. Internal to src/artifact (and its tests).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "artifact/program.h"
#include "util/status.h"

namespace tessera::artifact {

// PNG-style: a non-ASCII first byte, then CR LF, ^Z, LF, so that text-mode
// transfers and truncated "cat" output are caught by the magic check.
constexpr uint8_t kMagic[8] = {0x89, 'T', 'S', 'R', '\r', '\n', 0x1A, '\n'};

constexpr size_t kHeaderSize = 64;
constexpr size_t kEntrySize = 32;
constexpr uint32_t kMaxSections = 1u << 20;

// Header field offsets (all little-endian).
constexpr size_t kOffMagic = 0;          // u8[8]
constexpr size_t kOffVersion = 8;        // u32
constexpr size_t kOffSectionCount = 12;  // u32
constexpr size_t kOffFileSize = 16;      // u64
constexpr size_t kOffTableOffset = 24;   // u64
constexpr size_t kOffEntrySize = 32;     // u32, 32 in version 1
constexpr size_t kOffTableCrc = 36;      // u32, CRC-32C of the whole table
constexpr size_t kOffReserved = 40;      // u8[20], zero
constexpr size_t kOffHeaderCrc = 60;     // u32, CRC-32C of header bytes [0, 60)

// Section entry field offsets, relative to the entry.
constexpr size_t kEntKind = 0;       // u32 SectionKind
constexpr size_t kEntAlignment = 4;  // u32, power of two >= 64
constexpr size_t kEntOffset = 8;     // u64, from the start of the file
constexpr size_t kEntSize = 16;      // u64
constexpr size_t kEntCrc = 24;       // u32, CRC-32C of the section's bytes
constexpr size_t kEntReserved = 28;  // u32, zero

enum class SectionKind : uint32_t { kMeta = 1, kGraph = 2, kConstants = 3, kEngine = 4, kBucket = 5 };

constexpr uint32_t kSectionAlignment = 64;
constexpr uint32_t kConstantsAlignment = 4096;  // page-aligned weights
constexpr uint64_t kConstantAlignment = 64;     // each constant inside CONSTANTS

const char* section_kind_name(uint32_t kind);  // "META", ..., "UNKNOWN"
bool section_kind_known(uint32_t kind);

inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A section to write: `size` bytes, made of `pieces` at increasing offsets;
// bytes no piece covers are zero.
struct OutSection {
  struct Piece {
    uint64_t offset = 0;
    const void* data = nullptr;
    size_t size = 0;
  };
  SectionKind kind = SectionKind::kMeta;
  uint32_t alignment = kSectionAlignment;
  uint64_t size = 0;
  std::vector<Piece> pieces;
};

// Lays the sections out in the given order (table order = file order) and
// writes the file atomically (a temporary file renamed over `path`). The
// header's format version is the least that holds the sections (1, or 2 with
// BUCKET sections), or `min_version` where that is more (a META field older
// readers must not ignore).
Status write_container(const std::string& path, const std::vector<OutSection>& sections, uint32_t min_version = 1);
// The same container as bytes in memory.
Expected<std::string> write_container_bytes(const std::vector<OutSection>& sections, uint32_t min_version = 1);

struct SectionInfo {
  uint32_t kind = 0;
  uint32_t alignment = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t crc = 0;
  const uint8_t* data = nullptr;  // into the mapping
};

// A mapped, fully validated container.
struct Container {
  std::string path;
  std::shared_ptr<void> mapping;  // keeps the bytes mapped; tensors and blobs share it
  const uint8_t* base = nullptr;
  uint64_t file_size = 0;
  uint32_t version = 0;
  uint64_t table_offset = 0;
  std::vector<SectionInfo> sections;
};

// Maps `path` and checks magic, version, sizes, bounds, alignment, ordering,
// zero gaps and every checksum. Errors: "artifact 'path': <where>: <what>".
Expected<Container> open_container(const std::string& path);
// The same checks on a container given as bytes (copied; `name` names it in messages).
Expected<Container> container_from_bytes(const std::string& name, const void* data, size_t size);

// A validated artifact: the container (for `tessera inspect`) and the
// Program rebuilt from it, whose constants and blobs point into the mapping.
struct LoadedArtifact {
  Container container;
  Program program;
};
Expected<LoadedArtifact> load_artifact(const std::string& path);
Expected<LoadedArtifact> load_artifact_bytes(const std::string& name, const void* data, size_t size);

// "artifact 'path': " + where + ": " + what, as an InvalidModel status.
Status corrupt(const std::string& path, const std::string& where, const std::string& what);

}  // namespace tessera::artifact
