"""The adprof vocabulary, by value, as the C headers number it.

Source of truth: profiler/include/adprof/context.h (phases, roles, dtypes, spaces) and
profiler/include/adprof/ad_protocol.h (the AD protocol's names and version). The numbers are
part of the trace format and never change (append only). The test protocol.python_matches_headers
(tests/protocol/python_protocol_check.py) holds every number and name here to the headers: each
constant NAME is the header's ADPROF_NAME, and ROLE_NAMES / PHASE_NAMES are the enums' names.
"""

# context.h: adprof_phase
PHASE_OTHER = 0
PHASE_FORWARD = 1
PHASE_BACKWARD = 2
PHASE_OPTIMIZER = 3

# context.h: adprof_role
ROLE_FOREIGN = 0
ROLE_PARAMETER = 1
ROLE_INPUT = 2
ROLE_ACTIVATION = 3
ROLE_FORWARD_CACHE = 4
ROLE_ADJOINT = 5
ROLE_ACCUMULATION = 6
ROLE_DUPLICATE = 7
ROLE_OPTIMIZER_STATE = 8
ROLE_WORKSPACE = 9

ROLE_NAMES = ("foreign", "parameter", "input", "activation", "forward_cache", "adjoint",
              "accumulation", "duplicate", "optimizer_state", "workspace")
PHASE_NAMES = ("other", "forward", "backward", "optimizer")

# context.h: adprof_dtype
DTYPE_UNKNOWN = 0
DTYPE_F32 = 1
DTYPE_F64 = 2
DTYPE_I32 = 3
DTYPE_I64 = 4
DTYPE_BOOL = 5

# context.h: adprof_space
SPACE_HEAP = 0
SPACE_MMAP = 1
SPACE_DEVICE_BLOCK = 2
SPACE_DEVICE_SEGMENT = 3
SPACE_DEVICE_RAW = 4
SPACE_HOST_PINNED = 5

# ad_protocol.h
AD_PROTOCOL_VERSION = 7
AD_NONE = (1 << 64) - 1
AD_ENGINE = "ad.engine"
AD_POLICY = "ad.policy"
AD_INDEX_COPIES_SAME_WIDTH = 1
AD_LABEL_INDEX_WIDENED = "ad.index_widened"
AD_ARENA_WHATIF = "ad.arena.whatif"
AD_RESULT_IN_ARGUMENT = "ad.result_in_argument"

# ad_protocol.h: adprof_ad_policy (the bit of the policy masks)
AD_POLICY_FUSED_OPTIMIZER = 3
AD_POLICY_CHECKPOINTING = 4
AD_POLICY_NO_INDEX_WIDENING = 6
AD_POLICY_FREE_GRADIENTS = 7
AD_POLICY_DONATED_ARGUMENTS = 8

# ad_protocol.h: the tape's kinds (those a layered engine sends)
AD_TAPE_BEGIN = "ad.tape.begin"
AD_TAPE_END = "ad.tape.end"
AD_TAPE_BACKWARD_BEGIN = "ad.tape.backward_begin"
AD_TAPE_SAVE_STORAGE = "ad.tape.save_storage"
AD_TAPE_RELEASE_STORAGE = "ad.tape.release_storage"
AD_TAPE_LAYER_BEGIN = "ad.tape.layer_begin"
AD_TAPE_LAYER_END = "ad.tape.layer_end"
AD_TAPE_LAYER_BACKWARD = "ad.tape.layer_backward"
AD_TAPE_GRAD_ARRIVED = "ad.tape.grad_arrived"
AD_TAPE_GRAD_READY = "ad.tape.grad_ready"
AD_TAPE_GRAD_ZEROED = "ad.tape.grad_zeroed"
AD_TAPE_OPTIMIZER_BEGIN = "ad.tape.optimizer_begin"
AD_TAPE_OPTIMIZER_END = "ad.tape.optimizer_end"

# ad_protocol.h: ad.tape.backward_begin's flags
AD_BACKWARD_TO_LEAF_GRADS = 1
