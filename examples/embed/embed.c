/* A C program embedding Tessera: loads a model given on the command line, feeds zeros to every float input (symbolic
 * dims taken as 1) and prints each output's shape and first value. Usage: embed MODEL(.onnx|.tsr) */
#include <stdio.h>
#include <stdlib.h>
#include <tessera/tessera.h>

static int fail(tessera_error_t* e) {
  fprintf(stderr, "embed: error %d: %s\n", (int)tessera_error_code(e), tessera_error_message(e));
  tessera_error_release(e);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: embed MODEL\n");
    return 2;
  }
  tessera_env_t* env = NULL;
  tessera_session_t* session = NULL;
  tessera_error_t* e = tessera_env_create(&env);
  if (!e) e = tessera_session_create(env, argv[1], NULL, &session);
  if (e) return fail(e);
  size_t n_in = 0, n_out = 0;
  tessera_session_input_count(session, &n_in);
  tessera_session_output_count(session, &n_out);
  const char** names = calloc(n_in, sizeof(char*));
  tessera_value_t** inputs = calloc(n_in, sizeof(tessera_value_t*));
  tessera_value_t** outputs = calloc(n_out, sizeof(tessera_value_t*));
  for (size_t i = 0; i < n_in && !e; ++i) {
    tessera_io_info_t info;
    e = tessera_session_input_info(session, i, &info);
    if (e) break;
    int64_t dims[16];
    for (int32_t d = 0; d < info.rank && d < 16; ++d) dims[d] = info.dims[d] < 0 ? 1 : info.dims[d];
    names[i] = info.name;
    e = tessera_value_create(info.dtype, dims, (size_t)info.rank, &inputs[i]);
  }
  if (!e) {
    e = tessera_session_run(session, NULL, names, (const tessera_value_t* const*)inputs, n_in, NULL, outputs, n_out);
  }
  int rc = e ? fail(e) : 0;
  for (size_t i = 0; i < n_out && !rc; ++i) {
    tessera_io_info_t info;
    tessera_session_output_info(session, i, &info);
    printf("%s: dtype %d, dims [", info.name, (int)tessera_value_dtype(outputs[i]));
    for (size_t d = 0; d < tessera_value_rank(outputs[i]); ++d) {
      printf("%s%lld", d ? "," : "", (long long)tessera_value_dims(outputs[i])[d]);
    }
    printf("]");
    if (tessera_value_dtype(outputs[i]) == TESSERA_DTYPE_FLOAT32 && tessera_value_size_bytes(outputs[i]) >= 4) {
      printf(", first %g", (double)((float*)tessera_value_data(outputs[i]))[0]);
    }
    printf("\n");
  }
  for (size_t i = 0; i < n_in; ++i) tessera_value_release(inputs[i]);
  for (size_t i = 0; i < n_out; ++i) tessera_value_release(outputs[i]);
  free(names);
  free(inputs);
  free(outputs);
  tessera_session_release(session);
  tessera_env_release(env);
  return rc;
}
