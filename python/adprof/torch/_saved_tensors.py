"""Hook point 2, saved tensors: exactly what autograd saves becomes forward_cache, and returns to
activation when autograd drops it (a count per storage). Also what a program's own pack hook
keeps (save_on_cpu's copy), and checkpointing's forward run again inside backward."""

import functools
import weakref

import torch

from .. import _protocol as P
from ._common import Tensor, _NoDispatch, _tensors_in


class _Saved:
    """What the pack hook returns: holds the saved tensor; its death is autograd's release."""

    __slots__ = ("tensor", "ptr", "token", "owner")

    def __init__(self, tensor, ptr, token, owner):
        self.tensor = tensor
        self.ptr = ptr
        self.token = token
        self.owner = owner

    def __del__(self):
        owner = self.owner
        if owner is not None:
            try:
                owner._released(self)
            except Exception:  # at interpreter shutdown the modules may be half torn down
                pass



def _unpack(saved):
    return saved.tensor



class _KeepingPack:
    """Stands in for a program's pack hook on autograd's stack of saved-tensor hooks: calls it
    and tells the instrumentation what it kept. Everything else is the program's hook's own:
    attributes read, set and deleted on the stand-in reach the hook (torch.utils.checkpoint
    sets `_user_hooks` on its hook while it is pushed and reads `_checkpoint_internal` off the
    stack's top), so code that walks the stack sees what it put there."""

    __slots__ = ("_adprof_owner", "_adprof_hook", "__weakref__")

    def __init__(self, owner, hook):
        object.__setattr__(self, "_adprof_owner", owner)
        object.__setattr__(self, "_adprof_hook", hook)

    @staticmethod
    def can_wrap(hook):
        # A module (compile's GraphModule hooks, recognised by type) is pushed as it is.
        return callable(hook) and not isinstance(hook, (torch.nn.Module, _KeepingPack))

    def __call__(self, t):
        return self._adprof_owner._kept_by_pack(self._adprof_hook, t)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_adprof_hook"), name)

    def __setattr__(self, name, value):
        setattr(self._adprof_hook, name, value)

    def __delattr__(self, name):
        delattr(self._adprof_hook, name)

    def __eq__(self, other):
        return self._adprof_hook == (other._adprof_hook if isinstance(other, _KeepingPack)
                                     else other)

    def __hash__(self):
        return hash(self._adprof_hook)

    def __repr__(self):
        return repr(self._adprof_hook)



class SavedTensorHooks:
    """Instrumentation's saved-tensor hooks (a mixin: the state is Instrumentation's)."""

    # ---------------------------------------------------------------- recomputation
    # Checkpointing (torch.utils.checkpoint) runs a segment's forward again inside backward.
    # Its ops are forward work (activations; what they save is forward cache until autograd
    # releases it), not gradients. Recognised two ways: a saved_tensors_hooks scope opened
    # inside backward (the non-reentrant checkpoint's recomputation, 1.13 and 2.x), and a module
    # forward with grad enabled inside backward (the reentrant one).
    #
    # Only the innermost saved_tensors_hooks pair applies, so inside the program's own pair
    # (save_on_cpu, offloading, compression; checkpoint's forward) ours is not called: there
    # what the program's pack hook keeps is the forward cache (save_on_cpu's CPU copy), found
    # the same way as the recomputation's, and checkpoint's forward, which keeps nothing, has
    # none.
    def _wrap_hooks_enter(self, original):
        @functools.wraps(original)
        def __enter__(hooks):
            th = self.thread
            recompute = False
            pack = hooks.pack_hook
            try:
                if th.backward or (th.native and self.backward_active):
                    recompute = True
                    th.recompute += 1
                if pack is not self._pack and _KeepingPack.can_wrap(pack):
                    # Pushed in place of the program's hook for the push alone: the program's
                    # object keeps its own pack_hook (checkpoint reads and deletes attributes
                    # on it; compile inlines GraphModule hooks by type, never wrapped).
                    hooks.pack_hook = _KeepingPack(self, pack)
            except Exception as e:
                self._internal_error("saved_tensors_hooks", e)
            th.hook_scopes.append((id(hooks), recompute))
            try:
                return original(hooks)
            except BaseException:
                self._hooks_scope_closed(hooks)
                raise
            finally:
                if hooks.pack_hook is not pack:
                    hooks.pack_hook = pack
        return __enter__

    def _wrap_hooks_exit(self, original):
        @functools.wraps(original)
        def __exit__(hooks, *exc):
            try:
                return original(hooks, *exc)
            finally:
                self._hooks_scope_closed(hooks)
        return __exit__

    def _hooks_scope_closed(self, hooks):
        """The innermost saved_tensors_hooks scope this thread opened ends (scopes close in
        order: autograd's stack of hooks is a stack)."""
        th = self.thread
        scopes = th.hook_scopes
        if not scopes or scopes[-1][0] != id(hooks):
            return  # entered before install(), or not through __enter__
        _, recompute = scopes.pop()
        if recompute:
            th.recompute = max(0, th.recompute - 1)
            self._leave_scope(th)

    def _kept_by_pack(self, pack_hook, t):
        """Runs a pack hook of the program's (or checkpoint's recomputation's, innermost): what
        it keeps is forward cache until that dies (autograd dropped it: the backward that needed
        it ran). What it keeps: the tensors it returns (alone, or in a tuple or list:
        save_on_cpu's (device, copy)), or else the last tensor it made (a handle to a stored
        tensor)."""
        th = self.thread
        outer = th.capture
        th.capture = []
        try:
            packed = pack_hook(t)
        finally:
            made, th.capture = th.capture, outer
        try:
            kept = [packed] if isinstance(packed, Tensor) else (
                _tensors_in(packed) if type(packed) in (tuple, list) else [])
            if not kept and made:
                kept = made[-1:]
            for k in kept:
                self._kept_saved(k)
        except Exception as e:
            self._internal_error("_keeping_pack", e)
        return packed

    def _kept_saved(self, kept):
        ptr = self._addr(kept)
        if not ptr or self._is_param_or_input(ptr):
            return
        with self.saved_lock:
            n = self.saved.get(ptr, 0)
            self.saved[ptr] = n + 1
        if n == 0:
            self.ctx.retag(ptr, P.ROLE_FORWARD_CACHE, 0)
        refs = self.kept_refs

        def released(ref):
            refs.pop(id(ref), None)
            self._release_ptr(ptr)
        ref = weakref.ref(kept, released)
        refs[id(ref)] = ref


    # ---------------------------------------------------------------- saved tensors
    def _pack(self, t):
        try:
            return self._pack_recorded(t)
        except Exception as e:
            self._internal_error("_pack", e)
            return _Saved(t, 0, None, None)

    def _pack_recorded(self, t):
        th = self.thread
        ptr = self._addr(t)
        if ptr:
            if not self._is_param_or_input(ptr):
                with self.saved_lock:
                    n = self.saved.get(ptr, 0)
                    self.saved[ptr] = n + 1
                if n == 0:
                    self.ctx.retag(ptr, P.ROLE_FORWARD_CACHE, 0)
            else:
                ptr = 0
        token = self._tell("on_save", t) if not self._listener_failed else None
        # An output saved by its own node would make a cycle through the packed object
        # (tensor -> grad_fn -> saved -> tensor) that no collector sees: keep a detached alias.
        if t.grad_fn is not None:
            th.off += 1
            try:
                with _NoDispatch():  # the program's own dispatch modes never see our ops
                    t = t.detach()
            finally:
                th.off -= 1
        return _Saved(t, ptr, token, self)

    def _released(self, saved):
        if saved.token is not None:
            self._tell("on_release", saved.token)
        if saved.ptr:
            self._release_ptr(saved.ptr)

    def _release_ptr(self, ptr):
        if ptr:
            with self.saved_lock:
                n = self.saved.get(ptr, 0) - 1
                if n > 0:
                    self.saved[ptr] = n
                else:
                    self.saved.pop(ptr, None)
            if n <= 0:  # autograd dropped its last reference: an activation again (or freed)
                self.ctx.retag(ptr, P.ROLE_ACTIVATION, 0)
