// The .tsr artifact: one file holding a Program (spec: docs/artifact.md).
//
// Writing lays out a header, a section table, and the sections (metadata,
// glue graph, constants 64-byte aligned, one section per engine blob), each
// with a CRC-32C checksum. Reading maps the file, checks the header, every
// offset, size and checksum before touching a section, then rebuilds the
// Program with constants and blobs pointing into the mapping (no copies).
// Every failure is a Status naming the file, the section and what was wrong
// (exit code 2); nothing a corrupt file contains can crash the reader.
#pragma once

#include <string>

#include "artifact/program.h"
#include "util/status.h"

namespace tessera {

// Format 2 adds BUCKET sections; format 3 masked buckets (META "lower": sizes a bucket serves below its own, its glue
// graph padding and slicing). The writer writes the least that holds the program: 1 without buckets (older readers
// load it), 2 with exact buckets, 3 with a masked one.
constexpr uint32_t kArtifactFormatVersion = 3;
constexpr uint32_t kArtifactFormatVersionMin = 1;

Status write_artifact(const Program& program, const std::string& path);
Expected<Program> read_artifact(const std::string& path);
// The same in memory: the artifact's bytes, and a Program read from bytes
// (copied into an aligned buffer the Program keeps; `name` names it in
// messages). The checks are the file reader's.
Expected<std::string> write_artifact_bytes(const Program& program);
Expected<Program> read_artifact_bytes(const std::string& name, const void* data, size_t size);

// True if the file starts with the artifact magic (cheap sniff for the CLI).
bool is_artifact_file(const std::string& path);
// The same for a model given as bytes.
bool is_artifact_bytes(const std::string& bytes);

// What `tessera inspect` prints: header, sections with offsets, sizes and
// checksums, engines with backend, version and blob size, constants count and
// bytes, input/output signatures. Reads and validates like read_artifact.
Expected<std::string> describe_artifact(const std::string& path, bool json);

}  // namespace tessera
