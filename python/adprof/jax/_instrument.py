"""The JAX instrumentation: what XLA decided for each compiled program, told to adprof.

Hook points (feature-detected; docs/JAX.md, "How it works"):
  jax._src.compiler.backend_compile_and_load (backend_compile before it)
      after XLA compiled a module: its dump files (_xla_dump.py) are paired with the executable
  jax._src.pjit._get_fastpath_data -> None
      every call of a jitted function goes through Python (jaxlib's C++ fast path would run
      the executable without telling anyone); the results are the same, each call costs a few
      microseconds more
  jax._src.pjit._run_python_pjit
      the user's arguments and results as pytrees: the roles of parameters, inputs and
      optimizer state (the rule in roles_of_arguments)
  jax._src.interpreters.pxla.ExecuteReplicated.__call__
      one call of an executable: its arena is announced (ad.arena.call, ad_protocol.h), the
      call runs in an op scope named after the program and waits for its results (so that
      what the call allocates is inside the scope), then its results are tagged

Every hook calls the original and never raises into the program: a failure of the
instrumentation is reported once on stderr and the call goes on as without it.
"""

import atexit
import os
import shutil
import sys
import tempfile
import threading

from .. import _protocol as P
from . import _classify, _xla_dump

_LAYOUT = "ad.arena.layout"
_SLICE = "ad.arena.slice"
_CALL = "ad.arena.call"
_CALL_END = "ad.arena.call_end"
_NONE = P.AD_NONE
_VERSION = 7  # ad_protocol.h's ADPROF_AD_PROTOCOL_VERSION these events follow (the what-ifs)
_MAX_SOURCES = 29  # ad.arena.call: layout, call, then the source arguments' addresses
# A result's own block is cut like an arena from this size on (it holds temporaries before its
# result); smaller ones are left whole: an exact size that small is too common to be matched
# safely to the call (ad.arena.call matches the next allocation of the layout's size).
_MIN_OUTPUT_LAYOUT = 64 << 10

# ad_protocol.h: policy ids
_POLICY_CHECKPOINTING = 4
_POLICY_NO_INDEX_WIDENING = 6
_POLICY_DONATED_ARGUMENTS = P.AD_POLICY_DONATED_ARGUMENTS

_WORDS = {
    _POLICY_CHECKPOINTING: (
        "jax.checkpoint (jax.remat) around the function whose residuals the gradient keeps, "
        "with a policy that saves less: jax.checkpoint(f, policy=jax.checkpoint_policies."
        "nothing_saveable) recomputes them all in the backward, dots_saveable keeps only the "
        "matmuls' outputs",
        "jax.grad without jax.checkpoint (every residual kept for the transpose)"),
    # Measured on the seed's gather (docs/JAX.md): jnp indexing (x[i0, i1, i2], x.at[...].get
    # with any mode) normalizes the columns and concatenates them again, an s32 copy of idx that
    # the transpose's scatter reads; lax.gather on idx itself, promised in bounds, has none.
    _POLICY_NO_INDEX_WIDENING: (
        "gather with the index array itself, promised in bounds, instead of indexing with its "
        "columns: jax.lax.gather(x, idx, jax.lax.GatherDimensionNumbers(offset_dims=(), "
        "collapsed_slice_dims=(0, 1, 2), start_index_map=(0, 1, 2)), slice_sizes=(1, 1, 1), "
        "mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS) for x[idx[:, 0], idx[:, 1], "
        "idx[:, 2]] (indices known in [0, n)); keep idx int32 (an int16 index is widened to s32)",
        "x[tuple(idx.T)]-style indexing: its gradient normalizes and re-concatenates a copy of "
        "idx"),
}

# Described once a jitted function of the program's own returns a result that replaces one of
# its arguments (the same pytree of shapes and types, not donated): then with its name and
# argument numbers (_describe_donation).
_DONATION_WORDS = (
    "jax.jit(f, donate_argnums=...) for the arguments a jitted function returns replaced (its "
    "parameters, its optimizer state): their buffers become the results",
    "jax.jit(f) without donate_argnums (each result a new buffer beside the argument it "
    "replaces)")

_DTYPES = {"float32": P.DTYPE_F32, "float64": P.DTYPE_F64, "int32": P.DTYPE_I32,
           "int64": P.DTYPE_I64, "bool": P.DTYPE_BOOL}


def _is_optax_state(node):
    module = type(node).__module__ or ""
    return module.startswith("optax")


def _contains_optax_state(tree, depth=0):
    if _is_optax_state(tree):
        return True
    if depth > 4:
        return False
    if isinstance(tree, (tuple, list)):
        return any(_contains_optax_state(t, depth + 1) for t in tree)
    if isinstance(tree, dict):
        return any(_contains_optax_state(t, depth + 1) for t in tree.values())
    return False


_LIBRARIES = ("jax", "jaxlib", "optax", "flax", "equinox", "haiku", "numpy")


def _is_users(fun):
    """Whether a jitted function is the program's own (the pytree rule applies to it), not one
    of JAX's (an op run outside jit is a small jitted function of JAX's) or a library's."""
    module = getattr(fun, "__module__", None) or ""
    return module.split(".", 1)[0] not in _LIBRARIES


def _address(array):
    try:
        return array.unsafe_buffer_pointer()
    except Exception:  # deleted, sharded over devices, not an array
        return 0


class _Program:
    """One executable: its dump, its layouts (one per temp allocation) and its outputs."""

    def __init__(self, name, module):
        self.name = name
        self.module = module
        self.calls = 0
        self.layouts = []   # (layout id, bytes, [source parameter numbers])
        self.outputs = []   # per result: (role, phase, label)
        self.parameters = {}  # parameter number -> label (the HLO's name for it)
        self.layout_of = {}   # allocation index -> layout id (the allocations adprof cuts)
        self.donation_predicted = False


class Instrumentation:
    def __init__(self, ctx, dump_dir=None, own_dump_dir=True):
        self.ctx = ctx
        self.dump_dir = dump_dir
        self.own_dump_dir = own_dump_dir
        self._programs = {}      # id(executable) -> _Program (or None: no dump)
        self._executables = {}   # id(executable) -> executable (keeps the id valid)
        self._taken = set()      # dump prefixes paired already
        self._pending = {}       # id(executable) -> dump prefix, paired at compile time
        self._next_layout = 0
        self._lock = threading.RLock()
        self._local = threading.local()
        self._marks = {}         # id(array) -> role, from adprof.jax.mark
        self._restore = []
        self._warned = set()
        self.missing = []        # programs run without a dump (named in the report)
        self._donatable = {}     # jitted function name -> argument numbers donation would take

    # ---- set-up ----
    def install(self):
        import jax
        from jax._src import compiler, pjit
        from jax._src.interpreters import pxla
        self._describe(jax.__version__)
        self._patch(pjit, "_get_fastpath_data", lambda orig: lambda *a, **k: None)
        self._patch(pjit, "_run_python_pjit", self._wrap_run_python_pjit)
        for name in ("backend_compile_and_load", "backend_compile"):
            if hasattr(compiler, name):
                self._patch(compiler, name, self._wrap_compile)
                break
        self._patch(pxla.ExecuteReplicated, "__call__", self._wrap_execute)
        try:  # calls already compiled into jaxlib's C++ caches would bypass the hooks
            jax.clear_caches()
        except Exception:
            pass

    def uninstall(self):
        for owner, name, orig in reversed(self._restore):
            setattr(owner, name, orig)
        self._restore = []

    def _patch(self, owner, name, wrapper):
        orig = getattr(owner, name, None)
        if orig is None:
            self._warn(f"adprof.jax: this JAX has no {owner.__name__}.{name}; "
                       "calls are not attributed")
            return
        setattr(owner, name, wrapper(orig))
        self._restore.append((owner, name, orig))

    def _warn(self, text):
        if text not in self._warned:
            self._warned.add(text)
            sys.stderr.write(text + "\n")

    def _describe(self, version):
        ctx = self.ctx
        ctx.annotate(P.AD_ENGINE, [_VERSION, ctx.name("jax"), ctx.name(version)])
        for policy, (on_words, off_words) in _WORDS.items():
            values = [policy, 0, ctx.name(on_words), ctx.name(off_words)]
            if policy == _POLICY_NO_INDEX_WIDENING:
                # jnp indexing re-concatenates idx in its own width: the words remove that copy
                values.append(P.AD_INDEX_COPIES_SAME_WIDTH)
            ctx.annotate(P.AD_POLICY, values)
        on_words, off_words = _DONATION_WORDS
        ctx.annotate(P.AD_POLICY, [_POLICY_DONATED_ARGUMENTS, 0, ctx.name(on_words),
                                   ctx.name(off_words)])

    def mark(self, tree, role):
        import jax
        for leaf in jax.tree_util.tree_leaves(tree):
            self._marks[id(leaf)] = role
            self._retag(leaf, role, None)

    # ---- compile: pair the dump with the executable ----
    def _wrap_compile(self, orig):
        def compile_and_pair(*args, **kwargs):
            executable = orig(*args, **kwargs)
            try:
                self._pair(executable)
            except Exception as e:  # never into the program
                self._warn(f"adprof.jax: could not read XLA's dump: {e!r}")
            return executable
        return compile_and_pair

    def _pair(self, executable):
        if self.dump_dir is None:
            return
        name = executable.hlo_modules()[0].name
        with self._lock:
            prefix = _xla_dump.find_module_files(self.dump_dir, name, self._taken)
            if prefix is not None:
                self._taken.add(prefix)
                self._pending[id(executable)] = prefix
                self._executables[id(executable)] = executable

    # ---- arguments and results as the user wrote them ----
    def _wrap_run_python_pjit(self, orig):
        def run_python_pjit(p, args_flat, fun, args, kwargs):
            try:
                roles = self.roles_of_arguments(args) if _is_users(fun) else {}
            except Exception:
                roles = {}
            previous = getattr(self._local, "roles", None)
            previous_made = getattr(self._local, "made", None)
            previous_program = getattr(self._local, "program", None)
            self._local.program = None
            self._local.roles = roles
            self._local.made = {}  # result address -> the role the module gave it
            made = self._local.made
            try:
                result = orig(p, args_flat, fun, args, kwargs)
            finally:
                program = self._local.program
                self._local.roles = previous
                self._local.made = previous_made
                self._local.program = previous_program
            try:
                self._tag_results(result[0], args, roles, made)
            except Exception as e:
                self._warn(f"adprof.jax: results not tagged: {e!r}")
            if _is_users(fun):
                try:
                    self._results_in_arguments(p, fun, args, kwargs, result[0], program)
                except Exception as e:
                    self._warn(f"adprof.jax: donation not predicted: {e!r}")
            return result
        return run_python_pjit

    def roles_of_arguments(self, args):
        """id(leaf) -> role, by the documented rule (docs/JAX.md, "Roles"), for a jitted
        function of the program's own (not JAX's or a library's): arrays marked with
        adprof.jax.mark keep their mark; an argument holding optax state (any node of its
        pytree an optax class) is optimizer_state; the first positional argument is the
        parameters; every other array argument is an input."""
        import jax
        roles = {}
        for i, arg in enumerate(args):
            if _contains_optax_state(arg):
                role = P.ROLE_OPTIMIZER_STATE
            elif i == 0:
                role = P.ROLE_PARAMETER
            else:
                role = P.ROLE_INPUT
            for leaf in jax.tree_util.tree_leaves(arg):
                roles[id(leaf)] = self._marks.get(id(leaf), role)
        return roles

    def _tag_results(self, outs, args, roles, made):
        """Results that take the place of an argument keep its role: a result with the first
        argument's pytree structure is the new parameters, optax state stays optimizer_state.
        A result the module itself says is something else (a gradient, made by the transpose:
        it has the parameters' structure too) keeps what the module says."""
        import jax
        if not args:
            return
        tu = jax.tree_util
        first = tu.tree_structure(args[0])
        first_leaves = tu.tree_leaves(args[0])
        first_is_parameters = bool(first_leaves) and \
            roles.get(id(first_leaves[0])) == P.ROLE_PARAMETER
        top = outs if isinstance(outs, (tuple, list)) else (outs,)
        for out in top:
            if _contains_optax_state(out):
                role = P.ROLE_OPTIMIZER_STATE
            elif first_is_parameters and tu.tree_structure(out) == first:
                role = P.ROLE_PARAMETER
            else:
                continue
            for leaf in tu.tree_leaves(out):
                if made.get(_address(leaf)) is None:
                    self._retag(leaf, role, None)

    def _results_in_arguments(self, p, fun, args, kwargs, outs, program=None):
        """ad.result_in_argument for each result leaf that replaces a leaf of a positional
        argument not donated: a top-level result with that argument's pytree structure, leaf by
        leaf the same shape and dtype (new parameters for the old, new optimizer state). What
        donate_argnums would write into the argument's buffer (ad_protocol.h, policy 8)."""
        import jax
        tu = jax.tree_util
        top = outs if isinstance(outs, (tuple, list)) else (outs,)
        donated = p.params.get("donated_invars") or ()
        flat_offset, argnums, taken, donated_outputs = 0, [], set(), []
        out_offsets, n = [], 0
        for out in top:
            out_offsets.append(n)
            n += len(tu.tree_leaves(out))
        for number, arg in enumerate(args):
            leaves = tu.tree_leaves(arg)
            offset, flat_offset = flat_offset, flat_offset + len(leaves)
            if not leaves or any(donated[offset:offset + len(leaves)]):
                continue
            structure = tu.tree_structure(arg)
            for j, out in enumerate(top):
                if j in taken or tu.tree_structure(out) != structure:
                    continue
                out_leaves = tu.tree_leaves(out)
                if not all(getattr(a, "shape", None) == getattr(o, "shape", 0) and
                           getattr(a, "dtype", None) == getattr(o, "dtype", 0)
                           for a, o in zip(leaves, out_leaves)):
                    continue
                pairs = [(_address(o), _address(a)) for a, o in zip(leaves, out_leaves)]
                pairs = [(o, a) for o, a in pairs if o and a and o != a]
                if not pairs:
                    continue
                taken.add(j)
                argnums.append(number)
                donated_outputs.extend(range(out_offsets[j], out_offsets[j] + len(out_leaves)))
                for o, a in pairs:
                    self.ctx.annotate(P.AD_RESULT_IN_ARGUMENT, [_POLICY_DONATED_ARGUMENTS, o, a])
                break
        if argnums:
            name = getattr(fun, "__name__", None) or p.params.get("name", "f")
            self._describe_donation(name, tuple(argnums))
            if program is not None and not program.donation_predicted:
                program.donation_predicted = True
                self._predict_donation(program, donated_outputs)

    def _predict_donation(self, program, outputs):
        """ad.arena.whatif of the donation policy for the program's allocations (once): each
        donated result's own block is the argument's buffer then (0 bytes of its own), and the
        temporaries XLA kept in that block before the result move to the temp arena, which then
        holds at each schedule position its own values and those (_classify.donation_temp)."""
        module = program.module
        root = _classify.root_of(module)
        if root is None:
            return
        parts = root.operands if root.opcode == "tuple" else [root.name]
        finals = {parts[k] for k in outputs if k < len(parts)}
        donated = [a for a in module.allocations if a.kind == "output" and
                   any(v.instruction in finals for v in a.values)]
        displaced = [v for a in donated for v in a.values if v.instruction not in finals]
        ctx = self.ctx
        for a in donated:
            layout = program.layout_of.get(a.index)
            if layout is not None:
                ctx.annotate(P.AD_ARENA_WHATIF, [layout, _POLICY_DONATED_ARGUMENTS, 0])
        for a in module.allocations:
            layout = program.layout_of.get(a.index)
            if a.kind == "temp" and layout is not None:
                now = max(_classify.fullest(a.values, module.schedule_length)[0], 0)
                held = sum(v.size for v in _classify.live_at(a.values, now))
                with_it = _classify.donation_temp(module, a.values, displaced)
                ctx.annotate(P.AD_ARENA_WHATIF, [layout, _POLICY_DONATED_ARGUMENTS,
                                                 with_it + max(a.size - held, 0)])

    def _describe_donation(self, name, argnums):
        """The donation policy described again in the program's own terms (the last
        description counts): jax.jit(step, donate_argnums=(0, 1)) for each jitted function
        seen returning results that replace its arguments."""
        with self._lock:
            known = self._donatable.get(name, ())
            merged = tuple(sorted(set(known) | set(argnums)))
            if merged == known:
                return
            self._donatable[name] = merged
            fixes = []
            for fname, nums in self._donatable.items():
                spelled = "(" + ", ".join(str(n) for n in nums) + ("," if len(nums) == 1 else "") + ")"
                fixes.append(f"jax.jit({fname}, donate_argnums={spelled}) (as a decorator: "
                             f"@functools.partial(jax.jit, donate_argnums={spelled})); the "
                             f"arguments' buffers become the results that replace them, so "
                             f"read none of them after the call")
            off = "; ".join(f"jax.jit({fname}) without donate_argnums"
                            for fname in self._donatable)
        ctx = self.ctx
        ctx.annotate(P.AD_POLICY, [_POLICY_DONATED_ARGUMENTS, 0, ctx.name("; ".join(fixes)),
                                   ctx.name(off)])

    def _retag(self, array, role, source):
        addr = _address(array)
        if addr:
            self.ctx.retag(addr, role, source or 0)

    # ---- one call of an executable ----
    def _wrap_execute(self, orig):
        instrumentation = self

        def execute(self, *args):
            try:
                program = instrumentation._program(self.xla_executable)
            except Exception as e:
                instrumentation._warn(f"adprof.jax: could not read XLA's dump: {e!r}")
                program = None
            if program is None:
                return orig(self, *args)
            return instrumentation._call(orig, self, program, args)
        return execute

    def _program(self, executable):
        key = id(executable)
        with self._lock:
            if key in self._programs:
                return self._programs[key]
            self._executables[key] = executable
            name = executable.hlo_modules()[0].name
            prefix = self._pending.pop(key, None)
            if prefix is None and self.dump_dir is not None:
                prefix = _xla_dump.find_module_files(self.dump_dir, name, self._taken)
                if prefix is not None:
                    self._taken.add(prefix)
            module = _xla_dump.parse(prefix, name) if prefix else None
            if module is None:
                self.missing.append(name)
                self._programs[key] = None
                return None
            program = self._describe_program(name, module)
            self._programs[key] = program
            if self.own_dump_dir:
                _remove_module_files(prefix)
            return program

    def _describe_program(self, name, module):
        ctx = self.ctx
        program = _Program(name, module)
        cls = _classify.Classifier(module)
        for ins in module.instructions.values():
            if ins.opcode == "parameter" and ins.parameter >= 0 and ins.name in module.sequence:
                program.parameters[ins.parameter] = _unescape(ins.op_name) or ins.name
        for alloc in module.per_call(_MIN_OUTPUT_LAYOUT):
            layout = self._next_layout
            self._next_layout += 1
            what = "result block" if alloc.kind == "output" else "arena"
            if alloc.kind == "output":  # shown as it is at the end: the result it returns
                position = max((v.live[1] for v in alloc.values if v.live), default=0)
            else:
                position, _ = _classify.fullest(alloc.values, module.schedule_length)
            sources = []
            slices = []
            for v in alloc.values:
                role, phase, source = cls.role(v, result=alloc.kind == "output")
                label = f"{name} {what}: {v.instruction} {_short_shape(v.shape)}"
                src_arg = src_offset = _NONE
                if source is not None:
                    param = cls.parameters.get(source)
                    if param is not None and param >= 0:
                        if param not in sources and len(sources) < _MAX_SOURCES:
                            sources.append(param)
                        if param in sources:
                            src_arg = sources.index(param)
                        copied = program.parameters.get(param, source)
                    else:
                        for other in alloc.values:
                            if other.instruction == source:
                                src_offset = other.offset
                        copied = source
                    widened = " widened" if cls.widened(v.instruction, source) else ""
                    label += f", a{widened} copy of {copied}"
                if v.live:
                    label += f" (schedule {v.live[0]}-{v.live[1]} of {module.schedule_length})"
                op = _unescape(cls.op_name(v.instruction)) or v.instruction
                live = v.live or (0, module.schedule_length)
                dtype, dims = _dtype_and_dims(v.shape)
                slices.append([layout, v.offset, v.size, role, phase, ctx.name(op),
                               ctx.name(label), live[0], live[1], src_arg, src_offset, dtype]
                              + dims[:20])
            ctx.annotate(_LAYOUT, [layout, alloc.size, len(slices), max(position, 0),
                                   module.schedule_length, ctx.name(name),
                                   ctx.name(f"{name} {what}: bytes free at its fullest point")])
            for s in slices:
                ctx.annotate(_SLICE, s)
            if alloc.kind == "temp":
                self._predict_remat(name, module, cls, alloc, position, layout)
            program.layouts.append((layout, alloc.size, sources))
            program.layout_of[alloc.index] = layout
        program.outputs = self._output_roles(module, cls, name)
        return program

    def _predict_remat(self, name, module, cls, alloc, position, layout):
        """The checkpointing policy described again with what two policies would do to this
        program's calls (the last description counts, ad_protocol.h): predicted from the
        recorded schedule (_classify.remat_prediction), in bytes, so that a reader can hold
        them against a run; adprof whatif's row is nothing_saveable's."""
        nothing = _classify.remat_prediction(module, cls, alloc.values, "nothing_saveable")
        if nothing is None:
            return
        dots = _classify.remat_prediction(module, cls, alloc.values, "dots_saveable")
        now = sum(v.size for v in _classify.live_at(alloc.values, position))
        on_words, off_words = _WORDS[_POLICY_CHECKPOINTING]
        note = (f" (predicted for {name}: its arena at its fullest holds {now:,} B now; "
                f"with nothing_saveable at most {nothing.call:,} B: "
                f"{_remat_effect(nothing, now)}; with dots_saveable at most {dots.call:,} B: "
                f"{_remat_effect(dots, now)})")
        ctx = self.ctx
        ctx.annotate(P.AD_POLICY, [_POLICY_CHECKPOINTING, 0, ctx.name(on_words + note),
                                   ctx.name(off_words)])
        # The arena with it, for adprof whatif: the call's predicted bytes (the arena and what
        # the forward makes beside it, one block for the call's life: an upper bound) plus what
        # the arena holds beyond its values at its fullest now (alignment), kept as it is.
        ctx.annotate(P.AD_ARENA_WHATIF, [layout, _POLICY_CHECKPOINTING,
                                         nothing.call + max(alloc.size - now, 0)])

    def _output_roles(self, module, cls, name):
        """Per result of the entry (the ROOT tuple's operands, or the ROOT itself): the role its
        value has by the module's own structure."""
        root = None
        for ins_name in reversed(module.sequence):
            ins = module.instructions.get(ins_name)
            if ins is not None:
                root = ins
                break
        if root is None:
            return []
        parts = root.operands if root.opcode == "tuple" else [root.name]
        values = {v.instruction: v for a in module.allocations for v in a.values}
        out = []
        for part in parts:
            v = values.get(part)
            op = _unescape(cls.op_name(part)) or part
            if v is None:
                out.append((None, None, f"{name}: {op}"))
                continue
            role, phase, _src = cls.role(v, result=True)
            if role == P.ROLE_WORKSPACE:  # a result the update made (new parameters, state)
                role = None
            out.append((role, phase, f"{name}: result {len(out)}, {op}"))
        return out

    def _call(self, orig, execute, program, args):
        ctx = self.ctx
        self._local.program = program
        roles = getattr(self._local, "roles", None) or {}
        kept = [a for i, a in enumerate(args) if i in execute.kept_var_idx]
        addresses = [_address(a) for a in kept]
        for number, a in enumerate(kept):
            role = roles.get(id(a), self._marks.get(id(a)))
            if role is not None:
                self._retag(a, role, None)
            label = program.parameters.get(number)
            if label and addresses[number]:
                ctx.label(addresses[number], ctx.name(f"{program.name}: argument {label}"))
        program.calls += 1
        for layout, _size, sources in program.layouts:
            ctx.annotate(_CALL, [layout, program.calls] +
                         [addresses[s] if s < len(addresses) and addresses[s] else _NONE
                          for s in sources])
        ctx.op_begin(ctx.name(program.name), program.calls)
        try:
            out = orig(execute, *args)
            try:
                for o in out:
                    o.block_until_ready()
            except Exception:
                pass
        finally:
            ctx.op_end()
            for layout, _size, _sources in program.layouts:
                ctx.annotate(_CALL_END, [layout])
        try:
            self._tag_outputs(program, out, addresses)
        except Exception:
            pass
        return out

    def _tag_outputs(self, program, out, addresses):
        ctx = self.ctx
        arguments = set(addresses)
        made = getattr(self._local, "made", None)
        for o, (role, _phase, label) in zip(out, program.outputs):
            addr = _address(o)
            if not addr or addr in arguments:  # donated or passed through: the argument's
                continue
            if made is not None:
                made[addr] = role
            if role is not None:
                ctx.retag(addr, role, 0)
            ctx.label(addr, ctx.name(label))
            _describe_array(ctx, addr, o)

    # ---- end ----
    def close(self):
        if self.own_dump_dir and self.dump_dir:
            shutil.rmtree(self.dump_dir, ignore_errors=True)


def _remat_effect(prediction, now):
    """A remat prediction in words: where its bytes are, and what that changes."""
    if not prediction.recomputed:
        return ("every residual is a matmul's output or made from one element-wise only, "
                "which XLA computes once for the forward and the recomputation: as now")
    words = f"the arena {prediction.arena:,} B"
    if prediction.arena >= now:
        words += ", the recomputed residuals live with the adjoints"
    if prediction.beside:
        words += (f", and {prediction.beside:,} B beside it: the forward that the returned "
                  "value needs makes its residuals once more, in buffers of its own")
    if prediction.call < now:
        return words + f"; {now - prediction.call:,} B less"
    return (words + f"; no less ({prediction.call - now:,} B more): checkpoint smaller parts, "
            "e.g. each layer or a jax.lax.scan body")


def _describe_array(ctx, addr, array):
    try:
        dtype = _DTYPES.get(str(array.dtype), P.DTYPE_UNKNOWN)
        ctx.describe(addr, dtype, tuple(array.shape))
    except Exception:
        pass


_HLO_DTYPES = {"f32": P.DTYPE_F32, "f64": P.DTYPE_F64, "s32": P.DTYPE_I32, "s64": P.DTYPE_I64,
               "pred": P.DTYPE_BOOL}


def _dtype_and_dims(shape):
    """(adprof dtype, dimensions) of an HLO shape such as "s32[2097152,3]{1,0}"."""
    kind = _classify.element_type(shape)
    head = shape.split("]", 1)[0]
    dims = [int(d) for d in head.partition("[")[2].split(",") if d.strip().isdigit()]
    return _HLO_DTYPES.get(kind, P.DTYPE_UNKNOWN), dims


def _unescape(text):
    return text.replace("\\'", "'").replace('\\"', '"')


def _short_shape(shape):
    return shape.split("{", 1)[0]


def _remove_module_files(prefix):
    """The dump files of one module, once read (the dump directory stays small)."""
    directory, base = os.path.split(prefix)
    module = base.split(".", 1)[0] + "."  # module_NNNN.
    try:
        for n in os.listdir(directory):
            if n.startswith(module):
                path = os.path.join(directory, n)
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
    except OSError:
        pass


def make_dump_dir():
    """adprof's own directory for XLA's dump (never the user's), removed at exit, and the
    XLA_FLAGS that send the dump there. Returns (directory, own): a dump directory the user's
    XLA_FLAGS already name is read, not written to by adprof (own False)."""
    flags = os.environ.get("XLA_FLAGS", "")
    for token in flags.split():
        if token.startswith("--xla_dump_to="):
            return token.split("=", 1)[1], False
    directory = tempfile.mkdtemp(prefix="adprof-jax-")
    os.environ["XLA_FLAGS"] = (flags + f" --xla_dump_to={directory} --xla_dump_hlo_as_text"
                               ).strip()
    atexit.register(shutil.rmtree, directory, True)
    return directory, True
