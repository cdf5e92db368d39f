// What the harnesses that go through the public C API share: one environment, session options that keep a fuzzed
// model small (one thread, priority placement, nothing measured, a low memory limit), and a run on random inputs.
// A TESSERA_CODE_INTERNAL status is a bug in Tessera by the API's own definition, so it stops the fuzzer like a crash.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera_fuzz {

// Releases the error; traps on TESSERA_CODE_INTERNAL. Returns whether the call succeeded.
inline bool ok(tessera_error_t* e) {
  if (!e) return true;
  if (tessera_error_code(e) == TESSERA_CODE_INTERNAL) {
    std::fprintf(stderr, "internal error: %s\n", tessera_error_message(e));
    std::abort();
  }
  tessera_error_release(e);
  return false;
}

inline tessera_env_t* env() {
  static tessera_env_t* e = [] {
    tessera_env_t* made = nullptr;
    if (!ok(tessera_env_create(&made))) std::abort();
    return made;
  }();
  return e;
}

// Every backend that is installed, with native last; engines get one thread.
inline tessera_session_options_t* options(const char* backends, uint64_t max_memory) {
  tessera_session_options_t* o = nullptr;
  if (!ok(tessera_session_options_create(&o))) std::abort();
  if (!ok(tessera_session_options_set_threads(o, 1)) || !ok(tessera_session_options_set_backends(o, backends)) ||
      !ok(tessera_session_options_set_placement(o, "priority")) ||
      !ok(tessera_session_options_set_tune(o, TESSERA_TUNE_OFF)) ||
      !ok(tessera_session_options_set_max_memory(o, max_memory))) {
    std::abort();
  }
  return o;
}

// Runs `s` once on random inputs (the session's own sizes for symbolic dims), then reads what each output holds.
inline void run_on_random_inputs(tessera_session_t* s) {
  size_t n_in = 0, n_out = 0;
  if (!ok(tessera_session_input_count(s, &n_in)) || !ok(tessera_session_output_count(s, &n_out))) return;
  std::vector<tessera_value_t*> in(n_in, nullptr), out(n_out, nullptr);
  std::vector<const char*> names(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    tessera_io_info_t info;
    if (!ok(tessera_session_input_info(s, i, &info))) return;
    names[i] = info.name;
  }
  if (ok(tessera_session_random_inputs(s, 7, in.data(), n_in))) {
    if (ok(tessera_session_run(s, nullptr, names.data(), in.data(), n_in, nullptr, out.data(), n_out))) {
      for (tessera_value_t* v : out) {
        char* text = nullptr;
        if (ok(tessera_value_describe(v, 8, &text))) tessera_string_free(text);
      }
    }
  }
  for (tessera_value_t* v : in) tessera_value_release(v);
  for (tessera_value_t* v : out) tessera_value_release(v);
}

}  // namespace tessera_fuzz
