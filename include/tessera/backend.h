/* Tessera backend ABI, version 1 (minor revision 4).
 *
 * A backend is a shared library that exports one C symbol,
 *
 *     const tessera_backend_t* tessera_backend_query(uint32_t host_abi_version);
 *
 * returning a table of function pointers. Tessera asks it which nodes of a
 * model it can run (capability), hands it the regions it placed on it as
 * standalone ONNX models and stores what it returns (compile -> blob) in the
 * artifact, and at run time turns each blob back into an engine (load) that it
 * calls with concrete tensors (run) until it destroys it.
 *
 *   capability(model)            -> per-node verdicts (+ composite patterns)
 *   compile(region model)        -> blob         ahead of time, by `tessera compile`
 *   load(blob, constants)        -> engine       when an artifact is loaded
 *   run(engine, inputs, outputs)                 every inference
 *   destroy(engine)
 *
 * Rules that hold for every function:
 *  - Nothing but C types cross this boundary; a function never lets a C++
 *    exception escape (catch everything and return TESSERA_ERROR_INTERNAL).
 *  - Every function that can fail returns a tessera_status_t. On failure it may
 *    write a NUL-terminated, one-line, human-readable message into `msg`
 *    (capacity `msg_cap` bytes including the NUL; `msg` is never NULL and
 *    msg_cap >= 256). Messages name what was wrong: "node 'conv3' (Conv):
 *    dilations > 1 are not supported".
 *  - Models cross as serialized ONNX ModelProto bytes (opset recorded in the
 *    model). Tessera fills in the type and the shape of every value: graph
 *    inputs/outputs and every intermediate in graph.value_info. Shapes given to
 *    compile are concrete; capability may see symbolic dims (a backend that
 *    needs static shapes refuses such nodes).
 *  - Memory handed to a function is owned by the caller and valid only for the
 *    duration of the call, except where stated otherwise (constants at load).
 *  - Integers are little-endian; dtypes use ONNX's TensorProto.DataType codes.
 *  - Options structs are never NULL. A backend reads only the members that
 *    the struct_size the host put in them covers.
 *
 * Versioning: the host passes the ABI version it was built against to
 * tessera_backend_query. A backend that cannot serve that version returns
 * NULL. The host refuses a table whose abi_version differs from its own or
 * whose struct_size is smaller than the size of the version-1.0 table
 * (TESSERA_BACKEND_V1_0_SIZE); members added by later minor revisions go at
 * the end and are read only when struct_size covers them, so a plugin built
 * against an older minor revision keeps working (its newer members read as
 * absent).
 *
 * Minor revision 1 (members after estimate_cost) lets a backend describe
 * itself instead of the host knowing it by name: how its engines use threads
 * (threading), a colour for pictures (color), an estimate on the measured
 * scale of the machine it runs on (estimate_region), and a per-node profile of
 * a run (run_profiled). Minor revision 2 adds tessera_load_options_t's
 * max_memory: the session's memory limit, which an engine's own buffers keep
 * within. Minor revision 3 lets a backend's tensors live on a device
 * (memory, device_id) and gives the host what it needs to keep them there:
 * device buffers, copies between host and device, and a synchronize (see
 * "Device memory" below). Minor revision 4 lets an engine say how much host
 * memory it holds of its own (engine_bytes), which the host counts against a
 * session's memory limit.
 */
#ifndef TESSERA_BACKEND_H_
#define TESSERA_BACKEND_H_

#include <stddef.h>
#include <stdint.h>

#include "tessera/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TESSERA_BACKEND_ABI_VERSION 1u
/* The minor revision this header describes (members gated by struct_size). */
#define TESSERA_BACKEND_ABI_MINOR 4u

/* Name of the symbol every backend library exports. */
#define TESSERA_BACKEND_QUERY_SYMBOL "tessera_backend_query"

/* Status codes, grouped by range: 0 ok; 1-15 caller errors; 16-31 backend
 * errors. */
typedef enum tessera_status {
  TESSERA_OK = 0,
  TESSERA_ERROR_INVALID_ARGUMENT = 1, /* malformed model, wrong descriptor, bad option */
  TESSERA_ERROR_UNSUPPORTED = 2,      /* valid input the backend cannot handle */
  TESSERA_ERROR_INCOMPATIBLE_BLOB = 3,/* blob from another version of the backend, or corrupt */
  TESSERA_ERROR_COMPILE_FAILED = 16,  /* the engine could not be built */
  TESSERA_ERROR_RUNTIME = 17,         /* execution failed */
  TESSERA_ERROR_OUT_OF_MEMORY = 18,
  TESSERA_ERROR_INTERNAL = 31         /* a bug in the backend */
} tessera_status_t;

/* A dense, row-major (C-contiguous) tensor. `data` is at least 64-byte
 * aligned: Tessera's buffers, arenas and the constants in a mapped artifact
 * all are. A rank-0 tensor has dims == NULL; a tensor with no elements
 * (size_bytes == 0) may have data == NULL. */
typedef struct tessera_tensor {
  int32_t dtype;        /* TESSERA_DTYPE_* */
  int32_t rank;
  const int64_t* dims;  /* rank entries */
  void* data;
  size_t size_bytes;    /* product(dims) * element size */
} tessera_tensor_t;

/* A constant (initializer) of a region, by the name the region model uses. */
typedef struct tessera_named_tensor {
  const char* name;
  tessera_tensor_t tensor; /* data is read-only */
} tessera_named_tensor_t;

/* Bytes allocated by the backend and released through free_buffer. */
typedef struct tessera_buffer {
  void* data;
  size_t size;
} tessera_buffer_t;

/* Where capability reports its answers. Both callbacks copy what they are
 * given; the backend keeps no pointer to it. */
typedef struct tessera_capability_sink {
  void* ctx;
  /* One call per node of the model's main graph, by its index in
   * graph.node (0-based): supported = 1 if the backend can run the node,
   * else 0 with a short reason ("dtype int64", "weights not constant"). Nodes
   * never reported count as refused with reason "not reported". */
  void (*node)(void* ctx, int32_t node_index, int32_t supported, const char* reason);
  /* Optional to call: a pattern of nodes (indices as above) that the backend
   * runs best together (Conv + Add + Relu fused through post-ops, the
   * decomposed LayerNorm...). A composite the host uses is never split: all
   * its nodes go to this backend, in one region. The host may leave a
   * composite unused (a member pinned elsewhere, an overlap with another
   * composite, or a cycle it would close with others); it says so in its
   * report and places those nodes one by one. `pattern` names it for the
   * report. Every node in a composite must also be reported supported, and
   * the nodes must form a convex set (no path leaves the set and returns). */
  void (*composite)(void* ctx, const char* pattern, const int32_t* node_indices, int32_t count);
} tessera_capability_sink_t;

/* Options for load. */
typedef struct tessera_load_options {
  uint32_t struct_size;  /* sizeof(tessera_load_options_t) as the host knows it */
  int32_t num_threads;   /* threads the engine may use per run (>= 1); the
                            session's thread count */
  /* Minor revision 2 (read only when struct_size covers it): */
  uint64_t max_memory;   /* bytes one run of the engine may hold (its
                            buffers and scratch); 0 = no limit. An engine
                            that would need more fails load with
                            TESSERA_ERROR_OUT_OF_MEMORY, naming the need. */
} tessera_load_options_t;

/* An engine: whatever the backend needs to run one compiled region. */
typedef struct tessera_engine tessera_engine_t;

/* What the host measured of the machine a region will run on (once per
 * machine, cached): a backend's estimate_region prices its work against these
 * figures, never against constants fitted on another CPU. Read only the
 * members struct_size covers. */
typedef struct tessera_machine {
  uint32_t struct_size;    /* sizeof(tessera_machine_t) as the host knows it */
  int32_t num_threads;     /* threads the region will run with (>= 1) */
  double peak_gflops;      /* fp32 multiply-add peak of ONE thread, GFLOP/s (a multiply-add counts 2) */
  double gemm_gflops;      /* what a large fp32 GEMM reaches on ONE thread with the host's own kernel, GFLOP/s */
  double bandwidth_gbps;   /* streaming read+write bandwidth with num_threads threads, GB/s */
  double launch_us;        /* fixed cost of one run() of a trivial engine of THIS backend with num_threads
                              threads, measured; < 0 when not measured */
  double wake_us;          /* time to wake one sleeping thread (a futex round trip) */
  const char* cpu;         /* CPU model name, "" when unknown */
  const char* isa;         /* comma-separated ISA features the CPU has ("avx2,fma,avx512f,avx512_bf16,...") */
  double clock_ghz;        /* cycles per nanosecond of one core under load (a chain of dependent adds):
                              prices kernels known by their cycles per element */
} tessera_machine_t;

/* Receives a per-node profile from run_profiled. The callback copies what it
 * is given. */
typedef struct tessera_profile_sink {
  void* ctx;
  /* One call per step the engine executed, in execution order. `nodes` names
   * the region model's nodes (NodeProto.name) whose work the step did: one
   * node, or every node of a fused step (a convolution with its activation
   * and residual add). `what` is the engine's own name for the step
   * ("convolution jit:avx512_core"), possibly "". `start_us` is measured from
   * the start of the run() call, `duration_us` is the step's wall time. */
  void (*step)(void* ctx, const char* const* nodes, int32_t num_nodes, const char* what, double start_us,
               double duration_us);
} tessera_profile_sink_t;

/* How a backend's engines use threads (tessera_backend_t.threading). The host
 * uses it to choose how idle threads wait in a process that runs several
 * engines, and to price handing a run over from one engine to another. */
enum {
  TESSERA_THREADING_UNKNOWN = 0, /* not declared (a minor-0 table): treated as POOL */
  TESSERA_THREADING_CALLER = 1,  /* runs on the calling thread only */
  TESSERA_THREADING_POOL = 2,    /* its own worker threads, which sleep when idle (pthreadpool) */
  /* OpenMP worker threads (libgomp). They keep spinning after a parallel
   * region for as long as the process's OMP_WAIT_POLICY / GOMP_SPINCOUNT say,
   * which libgomp reads once, when it is loaded: the host sets them before it
   * opens the first plugin that could load it, from the threading of the
   * engines it expects to run (recorded in an artifact). */
  TESSERA_THREADING_OPENMP = 3
};

/* Where a backend's run() reads its inputs and writes its outputs
 * (tessera_backend_t.memory, minor revision 3).
 *
 * Device memory. A backend with TESSERA_MEMORY_DEVICE receives DEVICE
 * pointers in run()'s tensor descriptors (inputs and outputs alike); the
 * constants given to load() stay host memory (the engine uploads what it
 * needs once, at load). The host allocates device buffers with device_alloc,
 * moves values across the boundary with copy, and keeps a value that passes
 * from one region of a device to another region of the same backend and
 * device on the device, with no copy. Ordering: run() and copy() enqueue their
 * work on a stream of the CALLING THREAD's own (one stream per host thread,
 * so concurrent runs on different threads never wait for each other) and may
 * return before it is done; work enqueued by one thread runs in the order it
 * was enqueued. synchronize() returns when everything the calling thread
 * enqueued has finished; the host calls it before it reads what a copy to the
 * host wrote, and before it reuses a buffer that enqueued work reads. */
enum {
  TESSERA_MEMORY_HOST = 0,  /* ordinary host memory (every backend before minor revision 3) */
  TESSERA_MEMORY_DEVICE = 1 /* memory of device `device_id`, reached through device_alloc/copy */
};

/* Directions of tessera_backend_t.copy. */
enum { TESSERA_COPY_HOST_TO_DEVICE = 1, TESSERA_COPY_DEVICE_TO_HOST = 2, TESSERA_COPY_DEVICE_TO_DEVICE = 3 };

/* Flags in tessera_backend_t.flags. */
enum {
  /* run() may be called on one engine from several threads at once. Without
   * it, the host serializes calls to run() per engine. */
  TESSERA_BACKEND_FLAG_CONCURRENT_RUN = 1u << 0
};

typedef struct tessera_backend {
  /* --- version 1 --- */
  uint32_t abi_version;  /* TESSERA_BACKEND_ABI_VERSION the backend was built with */
  uint32_t struct_size;  /* sizeof(tessera_backend_t) as the backend knows it */
  const char* name;      /* short lower-case name used in --backends ("dnnl") */
  uint32_t flags;        /* TESSERA_BACKEND_FLAG_* */

  /* Optional (may be NULL). Version string of the backend and the engine it
   * wraps, without the backend's name ("1.0 (oneDNN 2.6.3)"). Stored in the
   * artifact; an artifact whose
   * engines were compiled by another version of the backend is refused at
   * load. Thread-safe; the string is static. */
  const char* (*version)(void);

  /* Which nodes of the model can this backend run? `model` is a serialized
   * ModelProto (a whole model, a nested body, or a region). Reports through
   * `sink` (see tessera_capability_sink_t). Must not keep pointers into
   * `model`. Returns TESSERA_OK even when it supports nothing; an error
   * (e.g. the model cannot be parsed) makes the host treat every node as
   * refused with the message as reason. Thread-safe. */
  tessera_status_t (*capability)(const void* model, size_t model_size, const tessera_capability_sink_t* sink,
                                 char* msg, size_t msg_cap);

  /* Builds an engine for one region ahead of time. `model` is a standalone
   * ModelProto whose graph inputs/outputs are the region's boundary tensors
   * (run() receives them in this order), whose initializers are the region's
   * constants (load() receives them again, so the blob need not embed them),
   * and whose every value has a concrete shape. Inputs are distinct; every
   * output is produced by a node of the region (never an input or an
   * initializer) and listed once. `options` is a NUL-terminated
   * "key=value;key=value" string, possibly empty, recorded in the artifact.
   * On success fills *out_blob (free with free_buffer); on failure leaves it
   * {NULL, 0} (the host still calls free_buffer on it). The blob must be
   * self-describing enough for load() to reject a blob from another version
   * with TESSERA_ERROR_INCOMPATIBLE_BLOB. A failure is not fatal for the
   * host: it places the region elsewhere and records the message. Thread-safe. */
  tessera_status_t (*compile)(const void* model, size_t model_size, const char* options, tessera_buffer_t* out_blob,
                              char* msg, size_t msg_cap);

  /* Releases a buffer returned by compile. NULL data is a no-op. */
  void (*free_buffer)(tessera_buffer_t* buffer);

  /* Creates an engine from a blob made by compile. `constants` are the
   * region's initializers, by name; their data stays valid and unchanged
   * until destroy() (it usually lives in the mmap'd artifact), so the engine
   * may reference it instead of copying. All expensive preparation (weight
   * reordering, kernel selection, primitive creation) belongs here, not in
   * the first run(). On success *out_engine is non-NULL and owned by the
   * caller, who releases it with destroy(). Thread-safe. */
  tessera_status_t (*load)(const void* blob, size_t blob_size, const tessera_named_tensor_t* constants,
                           size_t num_constants, const tessera_load_options_t* options,
                           tessera_engine_t** out_engine, char* msg, size_t msg_cap);

  /* Runs the engine. `inputs` and `outputs` follow the order of the region
   * model's graph inputs and outputs, with the dtypes and shapes it declared.
   * Output buffers are allocated by the host; the engine writes every
   * element of each. Input buffers are read-only and may alias nothing the
   * engine writes. Thread-safe per engine only with
   * TESSERA_BACKEND_FLAG_CONCURRENT_RUN (see flags). */
  tessera_status_t (*run)(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                          tessera_tensor_t* outputs, size_t num_outputs, char* msg, size_t msg_cap);

  /* Destroys an engine made by load. NULL is a no-op. */
  void (*destroy)(tessera_engine_t* engine);

  /* Optional (may be NULL). Estimated time in microseconds to run the region
   * `model` (as given to compile) once with `num_threads` threads. Used by
   * cost-based placement; TESSERA_ERROR_UNSUPPORTED means "no estimate".
   * Thread-safe. */
  tessera_status_t (*estimate_cost)(const void* model, size_t model_size, int32_t num_threads, double* out_us,
                                    char* msg, size_t msg_cap);

  /* --- version 1, minor revision 1: read only when struct_size covers them --- */

  /* TESSERA_THREADING_*: how this backend's engines use threads. */
  uint32_t threading;

  /* Optional (may be NULL). Fill colour of this backend's regions in
   * pictures, "#rrggbb". Static string. */
  const char* color;

  /* Optional (may be NULL). Estimated time in microseconds to run the region
   * `model` (as given to compile) once on the machine `machine` describes,
   * with machine->num_threads threads: the backend's own knowledge of its
   * kernels (their share of the peak, what it fuses, its layout conversions,
   * its slow paths) applied to the host's measurements of this machine. The
   * host prefers it to estimate_cost, uses it to rank candidates before
   * measuring them, and prices with it what it does not measure. Models
   * given to estimates (estimate_region and estimate_cost) may hold
   * initializers of more than 64 KiB without their data (data_location
   * EXTERNAL, external_data location "tessera:elided"): their dims and dtype
   * are there, their values are not needed to price the work. When the
   * compile options are not empty, they come with the model as its
   * metadata_props entry "tessera.backend_options" (the string compile
   * would get: "precision=bf16"), so that the estimate prices the engine
   * compile would build.
   * TESSERA_ERROR_UNSUPPORTED means "no estimate". Thread-safe. */
  tessera_status_t (*estimate_region)(const void* model, size_t model_size, const tessera_machine_t* machine,
                                      double* out_us, char* msg, size_t msg_cap);

  /* Optional (may be NULL: the backend gives no per-node profile, and the
   * host reports the region as one step). Same as run(), and also reports
   * every step it executes to `sink`. It may be slower than run() (a step may
   * wait for its work to finish before the next starts, so that times
   * belong to steps). Same thread-safety as run(). */
  tessera_status_t (*run_profiled)(tessera_engine_t* engine, const tessera_tensor_t* inputs, size_t num_inputs,
                                   tessera_tensor_t* outputs, size_t num_outputs, const tessera_profile_sink_t* sink,
                                   char* msg, size_t msg_cap);

  /* --- version 1, minor revision 3: read only when struct_size covers them --- */

  /* TESSERA_MEMORY_*: where run()'s tensors live. HOST (0) for a host
   * backend; with DEVICE, the four functions below are required. */
  int32_t memory;
  /* The device's index among the backend's devices (DEVICE only). */
  int32_t device_id;
  /* Allocates `bytes` (> 0) of device memory, aligned to at least 256 bytes.
   * Fails with TESSERA_ERROR_OUT_OF_MEMORY naming the size. Thread-safe. */
  tessera_status_t (*device_alloc)(size_t bytes, void** out_ptr, char* msg, size_t msg_cap);
  /* Frees what device_alloc returned, after waiting for the work that reads
   * or writes it. NULL is a no-op. Thread-safe. */
  void (*device_free)(void* ptr);
  /* Enqueues a copy of `bytes` bytes in `direction` (TESSERA_COPY_*) on the
   * calling thread's stream (see "Device memory"). Host memory stays valid
   * and unchanged until synchronize() returns. Thread-safe. */
  tessera_status_t (*copy)(void* dst, const void* src, size_t bytes, int32_t direction, char* msg, size_t msg_cap);
  /* Waits for everything the calling thread enqueued (run, copy); reports an
   * error of that work. Thread-safe. */
  tessera_status_t (*synchronize)(char* msg, size_t msg_cap);

  /* --- version 1, minor revision 4: read only when struct_size covers them --- */

  /* Optional (may be NULL: the host counts nothing for the engine). Bytes of
   * host memory `engine` holds of its own while it is loaded: constants in
   * its own layouts (reordered or packed weights) and the buffers it keeps
   * for its runs; not the constants load() was given, which the host holds.
   * The host counts it against a session's memory limit where the engine
   * belongs to a shape bucket compiled at run time (the plan cache's LRU).
   * Thread-safe. */
  uint64_t (*engine_bytes)(const tessera_engine_t* engine);
} tessera_backend_t;

/* The size of a version-1.0 table (members up to estimate_cost): the least
 * struct_size a host accepts. */
#define TESSERA_BACKEND_V1_0_SIZE (offsetof(tessera_backend_t, estimate_cost) + sizeof(void*))

/* The one exported symbol. Returns the backend's table, or NULL when it
 * cannot serve `host_abi_version`. The table is static and lives as long as
 * the library is loaded. */
typedef const tessera_backend_t* (*tessera_backend_query_fn)(uint32_t host_abi_version);

#if defined(_WIN32)
#define TESSERA_BACKEND_EXPORT __declspec(dllexport)
#else
#define TESSERA_BACKEND_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_BACKEND_H_ */
