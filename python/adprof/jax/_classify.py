"""Roles of the values of a compiled module, from the module itself (docs/JAX.md, "Roles").

JAX names every HLO instruction it emits after the transformation that made it (op_name
metadata): "jit(step)/jvp()/tanh" is the forward (JVP) part of a gradient, "jit(step)/
transpose(jvp())/dot_general" its transpose (the backward). From that alone:

  transpose part                                   adjoint (phase backward)
  a copy of one live array, as many elements       duplicate, with that array as its source
    (copy, convert, or a fusion of element-wise,     (an index re-concatenated, an int16 index
    slice, concatenate, bitcast, convert and         widened to s32: the seed's gather)
    constant broadcasts reading that one array;
    integer arithmetic, an index's normalization,
    too)
  forward part, read by the transpose part         forward_cache (a residual)
  forward part, not read by the transpose part     activation
  outside both, before the backward                activation (phase forward)
  outside both, after the backward                 workspace (phase optimizer: an update's
                                                     temporaries, e.g. optax's)
"""

import re

from .. import _protocol as P

_COPY_OPCODES = {"copy", "convert", "bitcast-convert"}
# Fused instructions that move or recompute an element from the same element of one array.
_ELEMENTWISE = {"parameter", "constant", "broadcast", "slice", "concatenate", "bitcast",
                "reshape", "convert", "copy", "select", "compare", "add", "subtract",
                "transpose", "clamp", "and", "or", "not", "negate", "iota"}
_ARITHMETIC = {"select", "compare", "add", "subtract", "clamp", "and", "or", "not", "negate"}
_DIMS = re.compile(r"^\(?([a-z]+[0-9]*)\[([0-9,]*)\]")
_INT_BITS = {"s8": 8, "s16": 16, "s32": 32, "s64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64}


def element_type(shape):
    m = _DIMS.match(shape.strip())
    return m.group(1) if m else ""


def element_count(shape):
    m = _DIMS.match(shape.strip())
    if not m:
        return -1
    n = 1
    for d in filter(None, m.group(2).split(",")):
        n *= int(d)
    return n


def in_transpose(op_name):
    return "transpose(" in op_name


def in_forward(op_name):
    return "jvp(" in op_name and not in_transpose(op_name)


class Classifier:
    def __init__(self, module):
        self.m = module
        self.first_transpose = None
        for pos, name in enumerate(module.sequence):
            ins = module.instructions.get(name)
            if ins is not None and in_transpose(ins.op_name):
                self.first_transpose = pos
                break
        self.parameters = {}  # entry parameter instruction -> its number
        for name in module.sequence:
            ins = module.instructions.get(name)
            if ins is not None and ins.opcode == "parameter":
                self.parameters[name] = _parameter_number(module, ins)

    def op_name(self, instruction):
        ins = self.m.instructions.get(instruction)
        return ins.op_name if ins is not None else ""

    def copy_source(self, instruction):
        """The instruction whose array this one copies, or None."""
        ins = self.m.instructions.get(instruction)
        if ins is None:
            return None
        sources = [o for o in ins.operands
                   if self.m.instructions.get(o) is not None
                   and self.m.instructions[o].opcode != "constant"]
        if len(sources) != 1:
            return None
        src = self.m.instructions[sources[0]]
        if element_count(src.shape) != element_count(ins.shape) or element_count(ins.shape) <= 0:
            return None
        if ins.opcode in _COPY_OPCODES:
            return src.name
        if ins.opcode == "fusion" and ins.calls:
            body = [self.m.instructions[n].opcode for n in self.m.computations.get(ins.calls, [])
                    if n in self.m.instructions]
            if not body or not all(op in _ELEMENTWISE for op in body):
                return None
            # Arithmetic keeps the information of an index (negative indices wrapped: jnp's
            # normalization), not of a float array (x + 1 is no copy of x).
            if any(op in _ARITHMETIC for op in body) and \
                    element_type(ins.shape) not in _INT_BITS:
                return None
            return src.name
        return None

    def widened(self, instruction, source):
        a = _INT_BITS.get(element_type(self.m.instructions[source].shape))
        b = _INT_BITS.get(element_type(self.m.instructions[instruction].shape))
        return a is not None and b is not None and b > a

    def role(self, value, result=False):
        """(role, phase, source instruction or None) of a value. A program's result that
        copies an argument outside any AD transformation is the program's purpose (a transfer,
        a cast the user asked for): not a duplicate."""
        op = self.op_name(value.instruction)
        source = self.copy_source(value.instruction)
        if result and source is not None and "jvp(" not in op:
            source = None
        if source is not None:
            phase = P.PHASE_BACKWARD if in_transpose(op) else P.PHASE_FORWARD
            return P.ROLE_DUPLICATE, phase, source
        if in_transpose(op):
            return P.ROLE_ADJOINT, P.PHASE_BACKWARD, None
        if in_forward(op):
            if any(in_transpose(self.op_name(u)) for u in value.uses):
                return P.ROLE_FORWARD_CACHE, P.PHASE_FORWARD, None
            return P.ROLE_ACTIVATION, P.PHASE_FORWARD, None
        start = value.live[0] if value.live else 0
        if self.first_transpose is not None and start > self.first_transpose:
            return P.ROLE_WORKSPACE, P.PHASE_OPTIMIZER, None
        return P.ROLE_ACTIVATION, P.PHASE_FORWARD, None


def _parameter_number(module, ins):
    return ins.parameter


def fullest(values, schedule_length):
    """(position, [values]) where the allocation holds the most bytes: the values live there,
    without the ones whose bytes a newer value already took (an in-place op's input and output
    meet at one position)."""
    best = (-1, 0, [])
    for pos in range(max(schedule_length, 1)):
        live = live_at(values, pos)
        total = sum(v.size for v in live)
        if total > best[1]:
            best = (pos, total, live)
    return best[0], best[2]


def live_at(values, pos):
    live = [v for v in values if v.live and v.live[0] <= pos <= v.live[1]]
    live.sort(key=lambda v: (-v.live[0], v.offset))  # the newest first
    taken, kept = [], []
    for v in live:
        end = v.offset + v.size
        if any(v.offset < e and s < end for s, e in taken):
            continue
        taken.append((v.offset, end))
        kept.append(v)
    kept.sort(key=lambda v: v.offset)
    return kept


# Element-wise opcodes a residual may be made of and still be computed once with its
# recomputation under dots_saveable (what XLA does with tanh(x @ w + b): measured, docs/JAX.md).
_POINTWISE = _ELEMENTWISE | {"multiply", "divide", "tanh", "exponential", "log", "logistic",
                             "maximum", "minimum", "sqrt", "rsqrt", "power", "abs", "sign",
                             "sine", "cosine", "exponential-minus-one", "log-plus-one"}


class RematPrediction:
    """What the program's call would hold with a checkpoint policy around the differentiated
    function: `arena`, the bytes its arena holds at its fullest; `beside`, the bytes of the
    forward's residuals made once more for the value the program returns, outside the arena
    and at the same time as the backward at most; `recomputed`, the residuals recomputed."""

    def __init__(self, arena, beside, recomputed):
        self.arena, self.beside, self.recomputed = arena, beside, recomputed

    @property
    def call(self):
        return self.arena + self.beside


def _op_tail(op_name):
    return op_name.rsplit("/", 1)[-1]


def made_from_dots(module, name, depth=0):
    """Whether an instruction is a matmul's output (its op_name's last part dot_general), or
    made from matmuls' outputs, arguments and constants by element-wise instructions only
    (a fusion of them counts as one)."""
    ins = module.instructions.get(name)
    if ins is None or depth > 32:
        return False
    if ins.opcode in ("parameter", "constant") or ins.opcode == "dot" or \
            _op_tail(ins.op_name) == "dot_general":
        return True
    if ins.opcode == "fusion":
        body = [module.instructions[n].opcode for n in module.computations.get(ins.calls, [])
                if n in module.instructions]
        if not body or not all(op in _POINTWISE for op in body):
            return False
    elif ins.opcode not in _POINTWISE:
        return False
    return all(made_from_dots(module, o, depth + 1) for o in ins.operands)


def returns_forward_value(module):
    """Whether a result of the program is made by the JVP part (value_and_grad's value): its
    forward then still runs with the residuals recomputed (jax.grad's alone would not)."""
    root = root_of(module)
    if root is None:
        return False
    parts = root.operands if root.opcode == "tuple" else [root.name]
    return any(in_forward(module.instructions[p].op_name) for p in parts
               if p in module.instructions)


def remat_prediction(module, cls, values, policy="nothing_saveable"):
    """A RematPrediction for jax.checkpoint(f, policy=jax.checkpoint_policies.POLICY) around
    the differentiated function, or None when the module has no backward or no forward cache.
    nothing_saveable recomputes every forward cache; dots_saveable keeps the matmuls' outputs
    and what is made from them element-wise only (XLA computes that once for the forward and
    the recomputation), and recomputes the rest. A recomputed residual lives only while the
    forward reads it, and again from the backward's start (JAX recomputes the forward there) to
    its last use; if the program returns a value of the forward, that forward runs again beside
    the backward and makes its residuals once more outside the arena (`beside`: on XLA's CPU
    runtime one fused kernel whose buffers are its own, docs/JAX.md). Bounds from the recorded
    schedule: XLA schedules the recomputed program anew."""
    if cls.first_transpose is None:
        return None
    position = {name: i for i, name in enumerate(module.sequence)}
    changed, forward, caches, recomputed = [], [], 0, 0
    for v in values:
        role, _phase, _src = cls.role(v)
        if role != P.ROLE_FORWARD_CACHE or not v.live:
            changed.append(v)
            continue
        caches += 1
        if policy == "dots_saveable" and made_from_dots(module, v.instruction):
            changed.append(v)
            continue
        recomputed += 1
        forward_uses = [position[u] for u in v.uses
                        if u in position and not in_transpose(cls.op_name(u))]
        last_forward = max(forward_uses, default=v.live[0])
        start = v.live[0]
        # (offsets of its own: the recomputed value is placed anew, not where it was)
        forward.append(_Range(v, (start, max(start, last_forward)), 1 << 62))
        changed.append(forward[-1])
        changed.append(_Range(v, (max(cls.first_transpose, start), v.live[1]), 1 << 63))
    if not caches:
        return None
    beside = _fullest_half_open(forward, module.schedule_length) \
        if returns_forward_value(module) else 0
    return RematPrediction(_fullest_half_open(changed, module.schedule_length), beside,
                           recomputed)


def _fullest_half_open(values, schedule_length):
    """The most bytes live at one position, ranges half-open: a buffer's last reader may write
    its result into it (in place), and XLA's inclusive ranges would count both there."""
    best = 0
    for pos in range(max(schedule_length, 1)):
        live = [v for v in values if v.live and v.live[0] <= pos and
                (pos < v.live[1] or v.live[0] == v.live[1])]
        best = max(best, sum(v.size for v in live))
    return best


class _Range:
    """A value with another live range (a recomputed forward cache's)."""

    def __init__(self, value, live, base):
        self.instruction, self.size, self.offset, self.live = \
            value.instruction, value.size, base + value.offset, live


def root_of(module):
    """The entry's ROOT instruction (the last of its schedule), or None."""
    for name in reversed(module.sequence):
        ins = module.instructions.get(name)
        if ins is not None:
            return ins
    return None


def donation_temp(module, values, displaced):
    """The bytes the temp allocation would hold at its fullest with the program's results
    donated: at each position its own values (live_at) and the temporaries XLA kept in the
    donated results' blocks before the results (`displaced`), which then need room of their
    own. Inclusive ranges for those: measured on the wide MLP, XLA's donated assignment places
    an in-place successor beside its operand, not in it (25,296,896 B predicted, 25,305,156 B
    temp_size_in_bytes)."""
    best = 0
    for pos in range(max(module.schedule_length, 1)):
        total = sum(v.size for v in live_at(values, pos))
        total += sum(v.size for v in displaced if v.live and v.live[0] <= pos <= v.live[1])
        best = max(best, total)
    return best
