/* Tessera C API, version 0.1.
 *
 * Load an ONNX model or a compiled .tsr artifact into a session and run it;
 * compile models to artifacts; read placement reports and artifact contents.
 * Everything the `tessera` command line does is reachable from here.
 *
 *     tessera_env_t* env = NULL;
 *     tessera_session_t* s = NULL;
 *     tessera_error_t* e = tessera_env_create(&env);
 *     if (!e) e = tessera_session_create(env, "model.tsr", NULL, &s);
 *     ... tessera_value_wrap(...) the inputs, tessera_session_run(...) ...
 *     if (e) { fprintf(stderr, "%s\n", tessera_error_message(e)); tessera_error_release(e); }
 *     tessera_session_release(s);
 *     tessera_env_release(env);
 *
 * Rules that hold for every function:
 *  - A function that can fail returns a tessera_error_t*: NULL on success,
 *    else an error the caller owns and releases with tessera_error_release.
 *    It carries a code (tessera_code_t) and a one-line message naming what
 *    was wrong and where ("input 'x' has shape [1,3] but the model expects
 *    [1,4]"). On failure, out-parameters are left untouched.
 *  - Misuse is an error, never a crash: NULL handles, NULL out-parameters,
 *    unknown names, wrong dtypes or shapes and buffers too small all return
 *    TESSERA_CODE_INVALID_ARGUMENT.
 *  - Handles (env, session options, session, value, run options) are created
 *    by *_create functions and released by their *_release function, which
 *    accepts NULL. A session keeps its environment alive; releasing the env
 *    handle first is allowed.
 *  - Strings passed in are NUL-terminated UTF-8 and copied when kept.
 *    Strings returned through `char**` are allocated by Tessera and freed with
 *    tessera_string_free; `const char*` results live as long as the handle
 *    they came from.
 *  - Thread safety: tessera_session_run may be called from any number of
 *    threads at once on one session, each with its own run options (or none).
 *    tessera_run_options_cancel may be called from any thread at any time.
 *    Other functions on one handle must not race with each other.
 *  - Nothing here throws or exits; the library installs no signal handlers.
 *
 * Versioning: TESSERA_API_VERSION_MAJOR changes when a declaration here
 * changes incompatibly; minor versions only add functions and enumerators.
 * tessera_api_version() gives the version of the library actually loaded.
 * Symbols: only tessera_* functions are exported by libtessera.so.
 */
#ifndef TESSERA_TESSERA_H_
#define TESSERA_TESSERA_H_

#include <stddef.h>
#include <stdint.h>

#include "tessera/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_API_VERSION_MAJOR 0
#define TESSERA_API_VERSION_MINOR 11

#if defined(__GNUC__)
#define TESSERA_API __attribute__((visibility("default")))
#else
#define TESSERA_API
#endif

/* ---- errors ------------------------------------------------------------ */

typedef enum tessera_code {
  TESSERA_CODE_OK = 0,
  TESSERA_CODE_INVALID_ARGUMENT = 1, /* a bad call: NULL handle, unknown name, wrong dtype/shape, bad option */
  TESSERA_CODE_INVALID_MODEL = 2,    /* a malformed or inconsistent model or artifact */
  TESSERA_CODE_UNSUPPORTED = 3,      /* valid, but not supported (an op, an opset, a dtype) */
  TESSERA_CODE_IO = 4,               /* a file cannot be read or written */
  TESSERA_CODE_CANCELLED = 5,        /* the run was cancelled (tessera_run_options_cancel) */
  TESSERA_CODE_RUNTIME = 6,          /* a kernel or an engine failed while running, or memory ran out */
  TESSERA_CODE_INTERNAL = 7          /* a bug in Tessera */
} tessera_code_t;

typedef struct tessera_error tessera_error_t;

TESSERA_API tessera_code_t tessera_error_code(const tessera_error_t* error);  /* TESSERA_CODE_OK for NULL */
TESSERA_API const char* tessera_error_message(const tessera_error_t* error); /* "" for NULL */
TESSERA_API void tessera_error_release(tessera_error_t* error);
TESSERA_API void tessera_string_free(char* s);

/* The library's API version, (major << 16) | minor, and its release ("0.1.0"). */
TESSERA_API uint32_t tessera_api_version(void);
TESSERA_API const char* tessera_version_string(void);

/* ---- environment --------------------------------------------------------- */

/* Process-wide settings shared by the sessions created from it: a log sink
 * for warnings (a tune cache that cannot be written, measurements taken on a
 * busy machine). Without a log callback, warnings go nowhere. */
typedef struct tessera_env tessera_env_t;

typedef enum tessera_log_level {
  TESSERA_LOG_WARNING = 1,
  TESSERA_LOG_INFO = 2
} tessera_log_level_t;

/* Called from the thread that caused the message; must be thread-safe. */
typedef void (*tessera_log_fn)(void* user, tessera_log_level_t level, const char* message);

TESSERA_API tessera_error_t* tessera_env_create(tessera_env_t** out);
TESSERA_API tessera_error_t* tessera_env_set_log(tessera_env_t* env, tessera_log_fn fn, void* user);
TESSERA_API void tessera_env_release(tessera_env_t* env);

/* The backends available to this process, as a comma-separated list in
 * priority order, native last ("dnnl,xnnpack,native"). Plugins are found on
 * TESSERA_BACKEND_PATH, then in lib/tessera beside the library. */
TESSERA_API tessera_error_t* tessera_available_backends(tessera_env_t* env, char** out);

/* ---- session options --------------------------------------------------------
 *
 * How a model is compiled and run: the command line's flags. They apply when
 * a session is created from an ONNX model (which is then compiled in memory
 * unless only native is asked for), to tessera_compile and to
 * tessera_partition_report. An artifact is run as it was compiled: only the
 * thread count applies to it. */
typedef struct tessera_session_options tessera_session_options_t;

typedef enum tessera_tune {
  TESSERA_TUNE_DEFAULT = 0, /* measure what matters, within the tune budget (TESSERA_TUNE=0 turns it off) */
  TESSERA_TUNE_OFF = 1,     /* estimates only (and measurements already in the tune cache) */
  TESSERA_TUNE_FULL = 2     /* measure every candidate region (`--tune`) */
} tessera_tune_t;

TESSERA_API tessera_error_t* tessera_session_options_create(tessera_session_options_t** out);
TESSERA_API void tessera_session_options_release(tessera_session_options_t* opts);
/* Threads for the native pool and every engine; 0 (the default): all hardware threads. A model whose compile
   measured it faster on one thread than on this many runs on one (tessera_session_threads says so). */
TESSERA_API tessera_error_t* tessera_session_options_set_threads(tessera_session_options_t* opts, int threads);
/* "dnnl,native": the backends to use, in priority order; NULL or "": every backend found. */
TESSERA_API tessera_error_t* tessera_session_options_set_backends(tessera_session_options_t* opts,
                                                                  const char* backends);
/* Pins input `name` to `dims` (rank entries, each >= 0); replaces an earlier pin of the same input. */
TESSERA_API tessera_error_t* tessera_session_options_set_shape(tessera_session_options_t* opts, const char* name,
                                                               const int64_t* dims, size_t rank);
/* Since 0.2. The memory one run may hold (its arena, the outputs and the tensors of steps whose shapes are known
 * only at run time; not the scratch memory inside kernels and engines), as --max-memory. A run that would need
 * more fails with TESSERA_CODE_INVALID_ARGUMENT naming the need and the limit. 0 (the default): no limit. */
TESSERA_API tessera_error_t* tessera_session_options_set_max_memory(tessera_session_options_t* opts, uint64_t bytes);
/* Since 0.3. Whether a run at an input shape without a plan goes on at once on
 * the shape-generic plan, a shape seen twice getting its own plan from a
 * background thread (1, the default), or builds that plan and waits (0). */
TESSERA_API tessera_error_t* tessera_session_options_set_plan_in_background(tessera_session_options_t* opts,
                                                                             int on);
/* Since 0.4. A model compiled with engines whose input dims are symbolic or
 * ranges: whether a shape with no bucket of its own may be compiled as a
 * bucket with engines for its exact dims by the background thread (1, the
 * default: runs meanwhile go on what is ready, and the bucket is kept in the
 * engine cache on disk, "engines" beside the tune cache, so the next process
 * finds it), or only gets a native plan (0). Needs plan_in_background. Since
 * 0.6 a shape is compiled once its runs have taken as long as a compile (see
 * tessera_session_options_set_bucket_payback_ms); before, when seen twice. */
TESSERA_API tessera_error_t* tessera_session_options_set_background_buckets(tessera_session_options_t* opts, int on);
/* Since 0.6. With background buckets: the time in ms a shape's runs must have
 * taken without a bucket before one is compiled for it, over two runs at least
 * (a compile serves only the runs after it). < 0 (the default): the mean wall
 * time of the session's bucket compiles so far (before the first, 1000 or 20
 * of the shape's runs, whichever is more); 0: after its first run. */
TESSERA_API tessera_error_t* tessera_session_options_set_bucket_payback_ms(tessera_session_options_t* opts, double ms);
/* Since 0.11. With background buckets: whether their compiles measure the
 * candidates on this machine as a compile does (1), or take estimates and the
 * tune cache's measurements (0, the default: measuring beside the session's
 * runs would mislead). For a caller that waits for its buckets with no runs
 * going on (tessera_session_wait_background). */
TESSERA_API tessera_error_t* tessera_session_options_set_measure_buckets(tessera_session_options_t* opts, int on);
/* Since 0.10. Compiling a model whose one varying input has ranges along its
 * spatial dims (--shape x=1,3,48,32..2048): masked buckets every `step` along
 * each ranged dim (default 32), each compiled ahead with engines at its largest
 * dims and serving every request up to them exactly (the request padded, the
 * padding masked where a convolution would read it, the results sliced back);
 * 0: none. None either where more than 64 would be needed, or where the
 * model's convolutions do not allow it (the compile warns why). */
TESSERA_API tessera_error_t* tessera_session_options_set_bucket_step(tessera_session_options_t* opts, int64_t step);
/* Since 0.2. "NAME=D0,D1,..", as --shape (checked when the model is loaded).
 * Since 0.3 a dim may be a range MIN..MAX, and specs of one input span every
 * size they give (before, a later one replaced an earlier); the session then
 * refuses input sizes outside the ranges. Since 0.7, for an artifact (whose shapes are compiled in; before, any
 * spec was refused) exact dims only: those its random inputs take (tessera_session_random_inputs), checked
 * against its compiled ranges when it is loaded. */
TESSERA_API tessera_error_t* tessera_session_options_add_shape(tessera_session_options_t* opts, const char* spec);
/* "OP_OR_NODE=BACKEND", as --place; may be given several times. */
TESSERA_API tessera_error_t* tessera_session_options_add_place(tessera_session_options_t* opts, const char* rule);
/* "cost" (the default) or "priority". */
TESSERA_API tessera_error_t* tessera_session_options_set_placement(tessera_session_options_t* opts,
                                                                   const char* placement);
TESSERA_API tessera_error_t* tessera_session_options_set_tune(tessera_session_options_t* opts, tessera_tune_t tune);
/* Seconds of measuring for TESSERA_TUNE_DEFAULT (default 3). */
TESSERA_API tessera_error_t* tessera_session_options_set_tune_budget(tessera_session_options_t* opts,
                                                                     double seconds);
/* The tune cache file; "" for none; NULL (the default): $TESSERA_TUNE_CACHE, else ~/.cache/tessera/tune.json. */
TESSERA_API tessera_error_t* tessera_session_options_set_tune_cache(tessera_session_options_t* opts,
                                                                    const char* path);
/* Regions with fewer nodes fall back to native (default 2). */
TESSERA_API tessera_error_t* tessera_session_options_set_min_region_nodes(tessera_session_options_t* opts, int n);
/* "K=V;K=V" handed to every backend's compile. */
TESSERA_API tessera_error_t* tessera_session_options_set_backend_options(tessera_session_options_t* opts,
                                                                         const char* options);

/* Since 0.5. What Conv, ConvTranspose, MatMul and Gemm compute in where an
 * engine can, as --precision: "fp32" (the default), "bf16" (bfloat16 with
 * float32 accumulation) or "fp16" (float16, short float16 sums added in
 * float32: native, on AVX512-FP16). A precision this CPU lacks the instructions
 * for fails here with TESSERA_CODE_UNSUPPORTED and the reason. Below fp32, a
 * compile runs the model beside the float32 model on the same inputs, and the
 * report gives every output's max absolute and relative error and cosine. */
TESSERA_API tessera_error_t* tessera_session_options_set_precision(tessera_session_options_t* opts,
                                                                   const char* precision);
/* Since 0.5. Limits on that error, as --accuracy-budget: "cos=MIN,abs=MAX,rel=MAX", any of them. A compile
 * past the budget fails with TESSERA_CODE_INVALID_ARGUMENT naming the output. NULL or "": none. */
TESSERA_API tessera_error_t* tessera_session_options_set_accuracy_budget(tessera_session_options_t* opts,
                                                                         const char* budget);
/* Since 0.5. A directory with input_<i>.pb (graph input order) for that comparison; NULL or "": random inputs. */
TESSERA_API tessera_error_t* tessera_session_options_set_accuracy_inputs(tessera_session_options_t* opts,
                                                                         const char* dir);
/* Since 0.7. For an ONNX model: every input dim the model leaves symbolic (and set_shape/add_shape do not name)
 * takes its size in DIR/input_<i>.pb (graph input order), as if given with add_shape, so that engines are compiled
 * for the shapes those inputs have; an input whose file is missing or does not fit its declared dims is left as
 * it is. Ignored for an artifact. NULL or "": none (the CLI's run/bench --input-dir). */
TESSERA_API tessera_error_t* tessera_session_options_set_shapes_from_inputs(tessera_session_options_t* opts,
                                                                            const char* dir);

/* ---- sessions -------------------------------------------------------------- */

typedef struct tessera_session tessera_session_t;

/* From a file: a .tsr artifact is loaded as compiled (engines built ahead of
 * time are loaded, nothing is compiled); an ONNX model is compiled as `tessera
 * run` would. `opts` may be NULL. */
TESSERA_API tessera_error_t* tessera_session_create(tessera_env_t* env, const char* path,
                                                    const tessera_session_options_t* opts, tessera_session_t** out);
/* The same from the bytes of an ONNX model or an artifact (copied; the
 * caller's buffer may be freed on return). An ONNX model's external data is
 * looked up relative to the working directory. */
TESSERA_API tessera_error_t* tessera_session_create_from_buffer(tessera_env_t* env, const void* data, size_t size,
                                                                const tessera_session_options_t* opts,
                                                                tessera_session_t** out);
TESSERA_API void tessera_session_release(tessera_session_t* session);

/* An input or output of a session. dims[i] is -1 where dim i is not known
 * (symbolic or unknown), and dim_names[i] then names its symbol ("batch"; ""
 * when it has none); rank is -1 when even the rank is unknown. The pointers
 * live as long as the session. */
typedef struct tessera_io_info {
  const char* name;
  int32_t dtype; /* TESSERA_DTYPE_*, 0 when unknown */
  int32_t rank;
  const int64_t* dims;
  const char* const* dim_names;
} tessera_io_info_t;

TESSERA_API tessera_error_t* tessera_session_input_count(const tessera_session_t* session, size_t* out);
TESSERA_API tessera_error_t* tessera_session_output_count(const tessera_session_t* session, size_t* out);
TESSERA_API tessera_error_t* tessera_session_input_info(const tessera_session_t* session, size_t index,
                                                        tessera_io_info_t* out);
TESSERA_API tessera_error_t* tessera_session_output_info(const tessera_session_t* session, size_t index,
                                                         tessera_io_info_t* out);
/* The session's engines as a JSON array of {"backend", "version"} ([] for a
 * model run natively). */
TESSERA_API tessera_error_t* tessera_session_engines_json(const tessera_session_t* session, char** out);
/* Since 0.2. The number of engines, and the backend of engine `index` (the
 * string lives as long as the session). */
TESSERA_API tessera_error_t* tessera_session_engine_count(const tessera_session_t* session, size_t* out);
TESSERA_API tessera_error_t* tessera_session_engine_backend(const tessera_session_t* session, size_t index,
                                                            const char** out);
/* Since 0.2. The threads the session runs on: fewer than asked for where the compile measured that faster. */
TESSERA_API tessera_error_t* tessera_session_threads(const tessera_session_t* session, int* out);
/* Since 0.8. The threads the session was asked for (tessera_session_options_set_threads, or every hardware thread
 * when not set): more than tessera_session_threads where the compile measured the model faster on fewer. */
TESSERA_API tessera_error_t* tessera_session_threads_asked(const tessera_session_t* session, int* out);

/* ---- values ------------------------------------------------------------------
 *
 * A dense, row-major tensor. A value made by tessera_value_create owns its
 * memory (64-byte aligned, zero-filled); one made by tessera_value_wrap
 * borrows the caller's, which must stay valid and unchanged while a run reads
 * it (no copy is made). */
typedef struct tessera_value tessera_value_t;

TESSERA_API tessera_error_t* tessera_value_create(int32_t dtype, const int64_t* dims, size_t rank,
                                                  tessera_value_t** out);
/* `size_bytes` must equal the element count times the element size. */
TESSERA_API tessera_error_t* tessera_value_wrap(int32_t dtype, const int64_t* dims, size_t rank, void* data,
                                                size_t size_bytes, tessera_value_t** out);
TESSERA_API void tessera_value_release(tessera_value_t* value);
TESSERA_API int32_t tessera_value_dtype(const tessera_value_t* value);   /* 0 for NULL */
TESSERA_API size_t tessera_value_rank(const tessera_value_t* value);     /* 0 for NULL */
TESSERA_API const int64_t* tessera_value_dims(const tessera_value_t* value);
TESSERA_API void* tessera_value_data(tessera_value_t* value);
TESSERA_API size_t tessera_value_size_bytes(const tessera_value_t* value);

/* Since 0.2. Reads an ONNX TensorProto file (the input_<i>.pb / output_<i>.pb
 * of ONNX's test cases and of `tessera run --input-dir`) into a new value;
 * `name` (may be NULL) receives the tensor's name, freed with
 * tessera_string_free. */
TESSERA_API tessera_error_t* tessera_value_read_file(const char* path, tessera_value_t** out, char** name);
/* Since 0.2. Writes `value` as an ONNX TensorProto file; `name` may be NULL. */
TESSERA_API tessera_error_t* tessera_value_write_file(const tessera_value_t* value, const char* name,
                                                      const char* path);
/* Since 0.2. Compares `actual` with `expected` as ONNX's backend tests do:
 * floats within atol + rtol * |expected| (NaN matches NaN, infinities match
 * exactly), every other type exactly. `*diff` receives "" when they match,
 * else one line saying what differs (freed with tessera_string_free). */
TESSERA_API tessera_error_t* tessera_value_compare(const tessera_value_t* expected, const tessera_value_t* actual,
                                                   double rtol, double atol, char** diff);
/* Since 0.2. One line: dtype, dims and the first `max_elements` values
 * ("float32[1,3] [0.5, -1, 2]"). */
TESSERA_API tessera_error_t* tessera_value_describe(const tessera_value_t* value, size_t max_elements, char** out);

/* Since 0.2. Random inputs for trying a model out, in graph input order:
 * `out` has room for the input count (tessera_session_input_count) and
 * receives new values. Symbolic dims take the low end of the range they
 * were compiled for (--shape NAME=..,MIN..MAX), else 1; floats are uniform in
 * [-1, 1), integers small and non-negative, booleans random. The same seed
 * gives the same values. */
TESSERA_API tessera_error_t* tessera_session_random_inputs(const tessera_session_t* session, uint64_t seed,
                                                           tessera_value_t** out, size_t n);
/* Since 0.2. The bytes of the arena a run with inputs of these values' dims
 * uses (inputs in graph order, n their count). */
TESSERA_API tessera_error_t* tessera_session_arena_bytes(const tessera_session_t* session,
                                                         const tessera_value_t* const* inputs, size_t n, size_t* out);
/* Since 0.3. What the session's plans per input shape have cost so far
 * (each pointer may be NULL): `built`, the plans built (one per input shape
 * run; again for a shape whose plan was evicted to keep at most 16, and
 * arenas within the memory limit); `waited`, the runs that built the plan
 * for their shape or waited for one being built; `generic`, the runs that
 * went on at once on the session's shape-generic plan, at a shape without a
 * plan of its own (models with symbolic input dims: a shape seen a second
 * time is planned in the background; tessera_session_options_set_plan_in_background). */
TESSERA_API tessera_error_t* tessera_session_plan_counts(const tessera_session_t* session, uint64_t* built,
                                                         uint64_t* waited, uint64_t* generic);
/* Since 0.3. The runs at the exact input dims of one of the artifact's
 * buckets (compiled with `--shape` naming exact shapes beside a range), which
 * ran on the engines compiled for those dims. */
TESSERA_API tessera_error_t* tessera_session_bucket_runs(const tessera_session_t* session, uint64_t* runs);
/* Since 0.4. Buckets the background made for shapes without one: `compiled`,
 * all of them; `from_cache`, those of them read back from the engine cache
 * (looked up at a shape's first sight); `failed`, compiles that failed, whose
 * shapes got native plans instead (each pointer may be NULL). Runs on such a
 * bucket count in tessera_session_bucket_runs too. */
TESSERA_API tessera_error_t* tessera_session_background_buckets(const tessera_session_t* session, uint64_t* compiled,
                                                                uint64_t* from_cache, uint64_t* failed);
/* Since 0.9. What the session's plans per input shape hold now, as counted
 * against its memory limit (tessera_session_options_set_max_memory): `arenas`,
 * their arenas; `engines`, the host memory the engines of buckets made in the
 * background hold of their own (reordered weights, run buffers; as far as
 * their backends say: the backend ABI's engine_bytes). Each pointer may be
 * NULL. */
TESSERA_API tessera_error_t* tessera_session_plan_cache_bytes(const tessera_session_t* session, uint64_t* arenas,
                                                              uint64_t* engines);
/* Since 0.11. Returns once the plans and bucket compiles the session has
 * queued in the background are done (at once when none is). A warm-up that
 * calls it after a run at each shape it will serve leaves the later runs on
 * what those shapes end up with; with
 * tessera_session_options_set_bucket_payback_ms(0), that is a bucket compiled
 * for each, engines included. */
TESSERA_API tessera_error_t* tessera_session_wait_background(const tessera_session_t* session);

/* ---- running ------------------------------------------------------------------ */

typedef struct tessera_run_options tessera_run_options_t;

TESSERA_API tessera_error_t* tessera_run_options_create(tessera_run_options_t** out);
TESSERA_API void tessera_run_options_release(tessera_run_options_t* ro);
/* A label for logs and traces. */
TESSERA_API tessera_error_t* tessera_run_options_set_tag(tessera_run_options_t* ro, const char* tag);
/* Cancels every run using these options, now or later (until reset): each
 * returns TESSERA_CODE_CANCELLED before its next step. Safe from any thread,
 * also while the run is in progress. */
TESSERA_API tessera_error_t* tessera_run_options_cancel(tessera_run_options_t* ro);
TESSERA_API tessera_error_t* tessera_run_options_reset(tessera_run_options_t* ro);
/* Profiles the runs using these options and writes each as a Chrome trace
 * (chrome://tracing, Perfetto) to `path`, with the steps inside engine
 * regions; NULL turns it off. A profiled run is slower. */
TESSERA_API tessera_error_t* tessera_run_options_set_trace_path(tessera_run_options_t* ro, const char* path);

/* Since 0.2. A record of profiled runs of one session, for summaries (time per
 * op type, the slowest nodes: `tessera bench --profile`) and Chrome traces of
 * several runs. Runs whose options carry it append to it (thread-safe). */
typedef struct tessera_profile tessera_profile_t;

typedef enum tessera_format {
  TESSERA_FORMAT_JSON = 0,
  TESSERA_FORMAT_TEXT = 1, /* what the command line prints */
  TESSERA_FORMAT_DOT = 2,  /* Graphviz, for placement reports */
  /* for placement reports, the two halves of `tessera compile`'s line:
   * "3 regions (1 dnnl, 2 native), 1 engines" and "placement cost, estimated ..." */
  TESSERA_FORMAT_REGIONS_LINE = 3,
  TESSERA_FORMAT_PLACEMENT_LINE = 4,
  /* Since 0.5, for placement reports: a compile at reduced precision against fp32, one line ("" at fp32):
   * "bf16 against fp32 (random inputs): y: max abs 0.0021, max rel 0.0004, cosine 0.999998" */
  TESSERA_FORMAT_ACCURACY_LINE = 5
} tessera_format_t;

TESSERA_API tessera_error_t* tessera_profile_create(tessera_profile_t** out);
TESSERA_API void tessera_profile_release(tessera_profile_t* profile);
/* Runs using these options are profiled into `profile` (NULL: no longer);
 * a profiled run is slower. The profile must outlive those runs. */
TESSERA_API tessera_error_t* tessera_run_options_set_profile(tessera_run_options_t* ro, tessera_profile_t* profile);
/* The number of runs recorded. */
TESSERA_API tessera_error_t* tessera_profile_runs(const tessera_profile_t* profile, size_t* out);
/* The recorded runs summarised (medians per node), as TESSERA_FORMAT_TEXT or
 * TESSERA_FORMAT_JSON. */
TESSERA_API tessera_error_t* tessera_profile_summary(const tessera_profile_t* profile, tessera_format_t format,
                                                     char** out);
/* The first `max_runs` recorded runs as one Chrome trace titled `title`. */
TESSERA_API tessera_error_t* tessera_profile_write_trace(const tessera_profile_t* profile, const char* title,
                                                         const char* path, size_t max_runs);

/* Runs the session once.
 *  - inputs: n_inputs values, named by input_names; every input of the model
 *    must be given exactly once, in any order.
 *  - outputs: n_outputs slots for the outputs named by output_names (NULL:
 *    every output in graph order, and n_outputs must be their count). A slot
 *    holding NULL receives a new value the caller releases; a slot holding a
 *    value binds that output to it: the output is written into its memory
 *    (computed there directly when the plan allows), and its dtype and dims
 *    must match the output's.
 *  - run_options may be NULL.
 * On failure no new value is returned; bound values may have been written. */
TESSERA_API tessera_error_t* tessera_session_run(tessera_session_t* session, const tessera_run_options_t* run_options,
                                                 const char* const* input_names,
                                                 const tessera_value_t* const* inputs, size_t n_inputs,
                                                 const char* const* output_names, tessera_value_t** outputs,
                                                 size_t n_outputs);

/* ---- compiling and reports ------------------------------------------------- */

/* Compiles the ONNX model at `model_path` into the artifact `out_path`, as
 * `tessera compile` does (placement, measuring and caching per `opts`, which
 * may be NULL). */
TESSERA_API tessera_error_t* tessera_compile(tessera_env_t* env, const char* model_path,
                                             const tessera_session_options_t* opts, const char* out_path);
/* The same from and to memory: the ONNX model's bytes in, the artifact's bytes
 * out (`*out` is freed with tessera_string_free; `*out_size` is its size). */
TESSERA_API tessera_error_t* tessera_compile_buffer(tessera_env_t* env, const void* model, size_t model_size,
                                                    const tessera_session_options_t* opts, char** out,
                                                    size_t* out_size);
/* The placement report of `tessera partition --json` for the ONNX model at
 * `model_path`, as a JSON document. */
TESSERA_API tessera_error_t* tessera_partition_report(tessera_env_t* env, const char* model_path,
                                                      const tessera_session_options_t* opts, char** json);
/* What an artifact holds, as `tessera inspect --json` prints it. */
TESSERA_API tessera_error_t* tessera_inspect_artifact(const char* path, char** json);

/* Since 0.2. A placement report: where each node went and why, the costs
 * considered, the measurements taken. */
typedef struct tessera_report tessera_report_t;

/* Compiles the ONNX model at `model_path` as tessera_compile does, writes the
 * artifact to `out_path` unless it is NULL, and returns the placement report
 * in `*report` unless `report` is NULL (then out_path must not be). */
TESSERA_API tessera_error_t* tessera_compile_with_report(tessera_env_t* env, const char* model_path,
                                                         const tessera_session_options_t* opts,
                                                         const char* out_path, tessera_report_t** report);
TESSERA_API void tessera_report_release(tessera_report_t* report);
/* The report as JSON (`partition --json`), text (`partition`), DOT, or a
 * half of the compile line. */
TESSERA_API tessera_error_t* tessera_report_render(const tessera_report_t* report, tessera_format_t format,
                                                   char** out);
/* Since 0.5. The placement report of the compile a session was made with (a
 * session on an ONNX model with engine backends), rendered as
 * tessera_report_render does; a session made without one (an artifact, a
 * model run natively) renders an empty report. */
TESSERA_API tessera_error_t* tessera_session_report(const tessera_session_t* session, tessera_format_t format,
                                                    char** out);
/* Since 0.2. What an artifact holds, as JSON or as the text `tessera inspect`
 * prints. */
TESSERA_API tessera_error_t* tessera_inspect(const char* path, tessera_format_t format, char** out);

/* Since 0.2. Progress of a compile (placement measuring, engine builds):
 * `done` of `total` steps (total 0 when unknown), and what is being done.
 * Called on the compiling thread. */
typedef void (*tessera_progress_fn)(void* user, int done, int total, const char* what);
TESSERA_API tessera_error_t* tessera_session_options_set_progress(tessera_session_options_t* opts,
                                                                  tessera_progress_fn fn, void* user);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TESSERA_TESSERA_H_ */
