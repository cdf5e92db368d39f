// libFuzzer harness: the TensorProto reader (ONNX test data, `tessera run --input-dir`), through the C API. Each input
// is a file's bytes; what reads is described, compared with itself, written back and read again, and must come back
// equal.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_session.h"

namespace {

// A file in memory that the reader opens by path.
struct MemFile {
  int fd = memfd_create("tensor", 0);
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ~MemFile() { close(fd); }
};

bool write_all(int fd, const uint8_t* data, size_t size) {
  if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) return false;
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tessera_fuzz::ok;
  static MemFile in, back;
  if (in.fd < 0 || back.fd < 0 || !write_all(in.fd, data, size)) std::abort();
  tessera_value_t* v = nullptr;
  char* name = nullptr;
  if (!ok(tessera_value_read_file(in.path.c_str(), &v, &name))) return 0;
  char* text = nullptr;
  if (ok(tessera_value_describe(v, 16, &text))) tessera_string_free(text);
  char* diff = nullptr;
  if (ok(tessera_value_compare(v, v, 0, 0, &diff))) tessera_string_free(diff);
  tessera_value_t* again = nullptr;
  if (write_all(back.fd, nullptr, 0) && ok(tessera_value_write_file(v, name, back.path.c_str())) &&
      ok(tessera_value_read_file(back.path.c_str(), &again, nullptr))) {
    char* round_trip = nullptr;
    if (ok(tessera_value_compare(v, again, 0, 0, &round_trip))) {
      if (round_trip[0] != '\0') {
        std::fprintf(stderr, "written and read back, the tensor changed: %s\n", round_trip);
        std::abort();
      }
      tessera_string_free(round_trip);
    }
  }
  tessera_value_release(again);
  tessera_value_release(v);
  tessera_string_free(name);
  return 0;
}
