/* adprof context API: how a program tells the profiler what it is doing.
 *
 * A program (an AD engine first of all) links libadprof_context.so, whose functions do nothing.
 * When the program runs under `adprof run`, libadprof_preload.so is preloaded and defines the
 * same symbols; the dynamic linker binds the program's calls to those, which stamp every
 * following allocation of the calling thread with the current (op, phase, role).
 * Not profiled, a call costs one call to an empty function.
 *
 * Vocabulary (phases, roles, spaces) is numbered here; the numbers are part of the trace format
 * and must never be renumbered (append only). An AD engine also describes its tape and its
 * memory policies through the AD protocol (ad_protocol.h), carried by adprof_annotate and
 * adprof_label below.
 */
#ifndef ADPROF_CONTEXT_H
#define ADPROF_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum adprof_phase {
  ADPROF_PHASE_OTHER = 0, /* outside any AD call */
  ADPROF_PHASE_FORWARD = 1,
  ADPROF_PHASE_BACKWARD = 2,
  ADPROF_PHASE_OPTIMIZER = 3,
} adprof_phase;
#define ADPROF_PHASE_COUNT 4

typedef enum adprof_role {
  ADPROF_ROLE_FOREIGN = 0, /* allocations made outside any op */
  ADPROF_ROLE_PARAMETER = 1,
  ADPROF_ROLE_INPUT = 2,
  ADPROF_ROLE_ACTIVATION = 3,
  ADPROF_ROLE_FORWARD_CACHE = 4,
  ADPROF_ROLE_ADJOINT = 5,
  ADPROF_ROLE_ACCUMULATION = 6,
  ADPROF_ROLE_DUPLICATE = 7,
  ADPROF_ROLE_OPTIMIZER_STATE = 8,
  ADPROF_ROLE_WORKSPACE = 9,
} adprof_role;
#define ADPROF_ROLE_COUNT 10

/* Element types for adprof_describe. */
typedef enum adprof_dtype {
  ADPROF_DTYPE_UNKNOWN = 0,
  ADPROF_DTYPE_F32 = 1,
  ADPROF_DTYPE_F64 = 2,
  ADPROF_DTYPE_I32 = 3,
  ADPROF_DTYPE_I64 = 4,
  ADPROF_DTYPE_BOOL = 5,
} adprof_dtype;

/* Memory spaces of tracked blocks (adprof_track_alloc). Host heap and anonymous mmap are
 * recorded by the interposer itself. */
typedef enum adprof_space {
  ADPROF_SPACE_HEAP = 0,           /* malloc & co. */
  ADPROF_SPACE_MMAP = 1,           /* anonymous mmap */
  ADPROF_SPACE_DEVICE_BLOCK = 2,   /* block handed to a tensor by a caching device allocator */
  ADPROF_SPACE_DEVICE_SEGMENT = 3, /* memory reserved from the driver by that allocator */
  ADPROF_SPACE_DEVICE_RAW = 4,     /* cudaMalloc & co. not owned by an instrumented allocator */
  ADPROF_SPACE_HOST_PINNED = 5,    /* cudaMallocHost */
} adprof_space;
#define ADPROF_SPACE_COUNT 6

/* 1 when running under the profiler (preloaded), 0 otherwise. */
int adprof_active(void);

/* Interns a name (an op kind such as "matmul", a buffer label such as "densenet.x3", an
 * annotation kind) and returns its id. The same string gives the same id within a process.
 * Not profiled: returns 0. */
uint32_t adprof_name(const char *name);

/* Op scopes nest. `instance` identifies this call of the op (e.g. the tape node id), so a
 * report can say "cast#3". */
void adprof_op_begin(uint32_t name_id, uint64_t instance);
void adprof_op_end(void);

/* The calling thread's phase and the role of the allocations it makes next. Both return the
 * previous value so scopes can restore it. */
adprof_phase adprof_set_phase(adprof_phase phase);
adprof_role adprof_set_role(adprof_role role);

/* A live buffer changes role (an activation saved by the tape becomes a forward cache). For a
 * duplicate, `source` is the live buffer whose information it holds; else NULL. */
void adprof_retag(const void *ptr, adprof_role role, const void *source);

/* Step marker (training step, repeated gradient call). */
void adprof_step(uint64_t step);

/* Metadata about a live buffer: a label, dtype and shape, a hash of its contents. */
void adprof_label(const void *ptr, uint32_t name_id);
void adprof_describe(const void *ptr, adprof_dtype dtype, uint32_t rank, const int64_t *shape);
void adprof_content_hash(const void *ptr, uint64_t hash);

/* Generic structured annotation: `kind_name_id` from adprof_name, up to 32 unsigned values.
 * The kinds the analysis understands, and their value layouts, are the AD protocol's
 * (ad_protocol.h); other kinds are kept in the trace and ignored. */
void adprof_annotate(uint32_t kind_name_id, const uint64_t *values, uint32_t count);

/* Blocks an instrumented allocator owns outside malloc (device memory, pools). The block is
 * stamped with the thread's context like any malloc. */
void adprof_track_alloc(const void *ptr, size_t size, adprof_space space, uint32_t device);
void adprof_track_free(const void *ptr, adprof_space space, uint32_t device);

/* From now on, device memory this process takes from the CUDA runtime or driver (cudaMalloc,
 * cudaMallocAsync, cuMemAlloc) is the reserve of a caching allocator whose blocks the program
 * declares itself (adprof_track_alloc(..., ADPROF_SPACE_DEVICE_BLOCK, ...)): the interposer
 * records it as ADPROF_SPACE_DEVICE_SEGMENT instead of DEVICE_RAW, so that its bytes count once,
 * as reserved, and not again beside the blocks cut from it. For an allocator that cannot say
 * which of its calls reserve (PyTorch's, instrumented from Python); one that declares its own
 * segments needs no such call. Process-wide, and never undone. */
void adprof_device_memory_is_reserve(void);

#ifdef __cplusplus
} /* extern "C" */

namespace adprof {

/* RAII scopes; each restores what it changed. */
class OpScope {
 public:
  OpScope(uint32_t name_id, uint64_t instance) { adprof_op_begin(name_id, instance); }
  ~OpScope() { adprof_op_end(); }
  OpScope(const OpScope &) = delete;
  OpScope &operator=(const OpScope &) = delete;
};

class PhaseScope {
 public:
  explicit PhaseScope(adprof_phase phase) : previous_(adprof_set_phase(phase)) {}
  ~PhaseScope() { adprof_set_phase(previous_); }
  PhaseScope(const PhaseScope &) = delete;
  PhaseScope &operator=(const PhaseScope &) = delete;

 private:
  adprof_phase previous_;
};

class RoleScope {
 public:
  explicit RoleScope(adprof_role role) : previous_(adprof_set_role(role)) {}
  ~RoleScope() { adprof_set_role(previous_); }
  RoleScope(const RoleScope &) = delete;
  RoleScope &operator=(const RoleScope &) = delete;

 private:
  adprof_role previous_;
};

}  // namespace adprof
#endif

#endif /* ADPROF_CONTEXT_H */
