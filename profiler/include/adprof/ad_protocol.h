/* adprof AD protocol, version 7: what an automatic-differentiation engine tells the profiler
 * beyond the context API (context.h), so that the analysis can explain the peak in the
 * engine's own words and replay its tape under other memory policies (adprof whatif).
 *
 * Any engine may emit it: everything rides on two calls of context.h,
 *   adprof_annotate(adprof_name(KIND), values, count)   an event with up to 32 values
 *   adprof_label(ptr, adprof_name(LABEL))                a fact about one live buffer
 * and strings inside values (an engine's name, an op's name, a fix's wording) are name ids from
 * adprof_name. The analysis knows no engine by name: it reads only the kinds and layouts below.
 *
 * Stability: kind names, value positions, policy ids, modes and flag bits are part of the trace
 * format. They are append only: a new value goes at the end of a layout (readers take what they
 * know and ignore the rest), a new policy takes the next id, and a changed meaning takes a new
 * kind name. ADPROF_AD_PROTOCOL_VERSION counts such additions; `ad.engine` records it.
 *
 * Addresses are the data pointers the engine allocated (malloc'd or tracked with
 * adprof_track_alloc); the analysis resolves them against its live blocks at the event. Node
 * ids are the engine's own, dense within a tape generation (0, 1, 2, ... in recording order,
 * every input's id below its consumer's). ADPROF_AD_NONE marks an absent value.
 *
 * Version 2 (an engine whose program is made of layers, such as modules, and whose gradients
 * live in parameters' gradient fields): layers of the forward, saves not tied to a node, the
 * life of parameters' gradients (arrived, ready, zeroed), the optimizer's own step, policy 7,
 * and placeholders in a policy's wording. Version 1 traces read as before.
 *
 * Version 4 (an engine that compiles programs whose temporaries the compiler packs into one
 * block per call, a preallocated temp buffer): arenas and their logical buffers
 * ("Arenas" below). Traces of earlier versions read as before.
 *
 * Version 5: the placeholder {container_path} in a policy's wording (below).
 *
 * Version 6 (what-ifs a compiled program's engine predicts for itself): policy 8 (donated
 * arguments), ad.arena.whatif and ad.result_in_argument ("Arenas" below).
 */
#ifndef ADPROF_AD_PROTOCOL_H
#define ADPROF_AD_PROTOCOL_H

#include <stdint.h>

#include "adprof/context.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ADPROF_AD_PROTOCOL_VERSION 7
#define ADPROF_AD_NONE (~(uint64_t)0)

/* ---------------- the engine's description of itself ----------------
 *
 * "ad.engine": {protocol version, engine name (name id), engine version (name id)}
 *   once, before its first tape (again only if something changed). The findings and the
 *   what-if table name the engine.
 *
 * "ad.policy": {policy id, on (0/1), how to switch it on (name id), how to switch it off
 *               (name id)}
 *   one per memory policy the engine has, after "ad.engine". The wordings are what a user of
 *   *that* engine types or writes: a finding's fix quotes the first ("drop --keep-all-caches",
 *   "wrap blocks 2-5 in torch.utils.checkpoint"), the what-if table the second. A policy the
 *   engine does not describe is taken as absent: no finding or prediction suggests it. An
 *   engine may describe a policy again later (the last description counts), e.g. once it has
 *   seen what the program does.
 *
 *   Placeholders (version 2): the checkpointing policy's wordings may name the chain the what-if
 *   picked, in the engine's own labels (ad.tape.layer_begin's label); the analysis replaces
 *     {first} {last}   the labels of the chain's first and last layers
 *     {parent}         the label of the layer that holds them (empty: none)
 *     {count}          the number of layers in the chain
 *     {segments}       the number of segments of the predicted schedule
 *     {checkpointed}   the number of layers the schedule checkpoints
 *     {container}      (version 3) the label the chain's layers are items of: their labels
 *                      less the last ".<index>" ("model.transformer.h" for
 *                      "model.transformer.h.0" .. "model.transformer.h.3")
 *     {container_path} (version 5) {container} less its first component, the root: the
 *                      container's path inside the model ("transformer.h"; empty when the
 *                      container is the root), for code that names the model as the program
 *                      holds it (labels start with the engine's own name for the root)
 *     {root}           (version 3) the first component of the first layer's label (the model)
 *   e.g. "checkpoint {first} .. {last} of {parent} in {segments} segments". A wording with a
 *   placeholder the analysis cannot fill (no chain) is not quoted.
 *
 *   Schedule (version 3, an optional fifth value of the checkpointing policy's description):
 *   what the engine's wording does, and so what the what-if predicts for it.
 *     0 (absent)  the longest chain of sibling layers, each taking the previous one's output,
 *                 in round(sqrt(n)) segments, every segment but the last checkpointed (the
 *                 sqrt(n) schedule)
 *     1           blocks: the layers that are items of one container (labels "<container>.<i>",
 *                 siblings called in a row), every one checkpointed on its own (as a
 *                 checkpoint around each block's forward, or a library's switch for its
 *                 blocks, does); of several such runs, the one whose checkpointing drops the
 *                 most forward-cache bytes
 *
 *   Index copies (version 7, an optional fifth value of the no_index_widening policy's
 *   description): which integer copies of an index the engine's wording removes, and so which
 *   duplicates a finding quotes it for.
 *     0 (absent)  the widened ones: labelled ad.index_widened, or of a wider type than their
 *                 source. A copy in its source's own width (a clone, a contiguous copy) is
 *                 not the policy's: its finding gives no engine words.
 *     1           ADPROF_AD_INDEX_COPIES_SAME_WIDTH: every integer copy, in its source's width
 *                 too (an engine whose indexing re-assembles its indices, and whose wording
 *                 says how to index without it)
 */
#define ADPROF_AD_ENGINE "ad.engine"
#define ADPROF_AD_POLICY "ad.policy"
#define ADPROF_AD_INDEX_COPIES_SAME_WIDTH 1

/* The shared list of memory policies. The id is the bit of the policy masks below
 * (mask bit 1 << id: on). Each id names a behaviour, whatever an engine calls it. */
typedef enum adprof_ad_policy {
  /* No adjoint, contribution or cache for a value that leads to no requested gradient. */
  ADPROF_AD_POLICY_ACTIVITY_ANALYSIS = 0,
  /* A forward cache is released right after the last backward rule that reads it, not when
   * the tape is reset. */
  ADPROF_AD_POLICY_EARLY_RELEASE = 1,
  /* Gradient contributions are added into one adjoint as they arrive, not each kept in a
   * buffer of its own and summed when all have arrived. */
  ADPROF_AD_POLICY_INPLACE_ACCUMULATION = 2,
  /* The optimizer steps a parameter as soon as its gradient is complete, and the gradient dies
   * there, instead of all gradients living until a separate optimizer step. */
  ADPROF_AD_POLICY_FUSED_OPTIMIZER = 3,
  /* Segments of a chain keep only their input in forward and are recomputed in backward. */
  ADPROF_AD_POLICY_CHECKPOINTING = 4,
  /* A repeated gradient reuses the previous call's tape and buffers (an arena, kept idle
   * between calls) instead of allocating them again. */
  ADPROF_AD_POLICY_REUSABLE_TAPE = 5,
  /* Index arrays are read in their own width, never copied into a wider integer type. */
  ADPROF_AD_POLICY_NO_INDEX_WIDENING = 6,
  /* (version 2) A parameter's gradient is freed when the program resets it (after the
   * optimizer step), not zeroed in place and kept: until the next backward delivers one, the
   * parameter has no gradient buffer, and that first gradient becomes it. Off when the program
   * zeroes gradients in place (ad.tape.grad_zeroed). */
  ADPROF_AD_POLICY_FREE_GRADIENTS = 7,
  /* (version 6) A compiled program's result that replaces one of its arguments (the same shape
   * and type, e.g. new parameters for the old) is written into that argument's buffer, which the
   * caller gives up, instead of into a new buffer beside it (ad.result_in_argument). */
  ADPROF_AD_POLICY_DONATED_ARGUMENTS = 8,
} adprof_ad_policy;
#define ADPROF_AD_POLICY_COUNT 9

/* ---------------- the tape ----------------
 *
 * "ad.tape.begin": {tape id, generation, policies on (mask)}
 *   first event of a tape generation (a recording of nodes that one backward sweep will read).
 *   Tape ids are the engine's; (tape id, generation) names the generation. Events that follow
 *   on the same thread belong to the innermost generation begun there and not yet ended.
 *
 * "ad.tape.leaf": {node, address, bytes, requires gradient (0/1)}
 *   a leaf (a parameter or input) enters the tape.
 *
 * "ad.tape.node": {node, op name (name id), output address, output bytes, n inputs,
 *                  input node x n (ADPROF_AD_NONE: an input the tape does not follow)}
 *   an op is recorded (inside its op scope, so the analysis sees what its forward allocated).
 *   At most 27 inputs are listed.
 *
 * "ad.tape.save": {node, saved address, bytes, slot (input index; 31: the output),
 *                  users (bit i: input i's gradient reads this tensor)}
 *   the node keeps a tensor for its backward rule (a forward cache).
 *
 * "ad.tape.release": {node, saved address}
 *   the node drops a tensor it saved (after its rule, or when the tape is reset). If the
 *   buffer is freed right after, the tape was its last holder.
 *
 * "ad.tape.checkpoint": {node, n inputs, output address}
 *   a checkpoint segment: the node's intermediates were not kept; its backward recomputes the
 *   segment on a nested tape (whose own events follow, with another tape id).
 *
 * "ad.tape.backward_begin": {root node, number of nodes, policies on (mask), flags}
 *   the reverse sweep starts. flags: ADPROF_AD_BACKWARD_* below.
 *
 * "ad.tape.requested": {node x up to 32}
 *   right after backward_begin: the nodes whose gradients the caller asked for (several
 *   events if more).
 *
 * "ad.tape.backward_node": {node}
 *   the node's backward rule starts (inside the node's op scope: what the rule allocates is
 *   attributed to it until the scope ends).
 *
 * "ad.tape.contribution": {target node, from node, address, bytes, mode, source address}
 *   a gradient contribution from `from`'s rule reaches `target`. mode: ADPROF_AD_CONTRIBUTION_*
 *   below; address: the adjoint (modes 0-2) or the pending buffer (mode 3); source: the
 *   contribution's own buffer before it was adopted, added or copied.
 *
 * "ad.tape.adjoint_sum": {node, address, bytes, n}
 *   deferred accumulation: the node's n pending contributions became its adjoint at `address`
 *   (n = 1: the pending buffer itself).
 *
 * "ad.tape.adjoint_complete": {node, address, bytes}
 *   a leaf's adjoint is complete (no contribution is still to come).
 *
 * "ad.tape.optimizer_step": {leaf node, parameter address}
 *   a fused optimizer step of that parameter (its gradient dies there).
 *
 * "ad.tape.end": {tape id, generation}
 *   the generation is over (the tape is reset; its remaining caches are released).
 *
 * Version 2: layers, and gradients that live in parameters.
 *
 * "ad.tape.save_storage": {address, bytes}
 *   a tensor is saved for the backward by a node the engine does not number (it describes
 *   layers instead of nodes); the save belongs to the generation.
 *
 * "ad.tape.release_storage": {address}
 *   such a save is dropped (emitted before the engine lets go of the tensor, so a free that
 *   follows says the tape was its last holder); matched to its save by address.
 *
 * "ad.tape.layer_begin": {layer, label (name id), parent layer (ADPROF_AD_NONE: none),
 *                         input address (ADPROF_AD_NONE: no tensor input)}
 *   a layer of the forward (a module call) starts. Layer ids are dense within a generation, in
 *   begin order; the parent is the innermost layer open when it began. The label is the
 *   engine's name for it ("model.layers.3"), quoted in fixes.
 *
 * "ad.tape.layer_end": {layer, output address (ADPROF_AD_NONE: none)}
 *   the layer returns.
 *
 * "ad.tape.layer_backward": {layer}
 *   the gradient of the layer's output has arrived: its backward starts (the moment a
 *   checkpointed segment ending with this layer would be recomputed).
 *
 * Parameters (the leaves an optimizer steps) are named by the engine's parameter ids, stable for
 * the whole run; these events may come outside any generation.
 *
 * "ad.tape.grad_arrived": {parameter, gradient address, bytes}
 *   a gradient for the parameter is delivered by the backward, before it is accumulated into
 *   the parameter's gradient buffer (or becomes it).
 *
 * "ad.tape.grad_ready": {parameter, gradient buffer address, bytes}
 *   the parameter's gradient buffer is complete for this backward (what a step fused into the
 *   backward would step with, and free).
 *
 * "ad.tape.grad_zeroed": {parameter, gradient buffer address, bytes}
 *   the program zeroes the parameter's gradient buffer in place and keeps it (policy 7 off).
 *
 * "ad.tape.optimizer_begin": {step}   "ad.tape.optimizer_end": {step}
 *   a separate optimizer step (all parameters at once, after the backward) runs between them.
 */
#define ADPROF_AD_TAPE_BEGIN "ad.tape.begin"
#define ADPROF_AD_TAPE_LEAF "ad.tape.leaf"
#define ADPROF_AD_TAPE_NODE "ad.tape.node"
#define ADPROF_AD_TAPE_SAVE "ad.tape.save"
#define ADPROF_AD_TAPE_RELEASE "ad.tape.release"
#define ADPROF_AD_TAPE_CHECKPOINT "ad.tape.checkpoint"
#define ADPROF_AD_TAPE_BACKWARD_BEGIN "ad.tape.backward_begin"
#define ADPROF_AD_TAPE_REQUESTED "ad.tape.requested"
#define ADPROF_AD_TAPE_BACKWARD_NODE "ad.tape.backward_node"
#define ADPROF_AD_TAPE_CONTRIBUTION "ad.tape.contribution"
#define ADPROF_AD_TAPE_ADJOINT_SUM "ad.tape.adjoint_sum"
#define ADPROF_AD_TAPE_ADJOINT_COMPLETE "ad.tape.adjoint_complete"
#define ADPROF_AD_TAPE_OPTIMIZER_STEP "ad.tape.optimizer_step"
#define ADPROF_AD_TAPE_END "ad.tape.end"
#define ADPROF_AD_TAPE_SAVE_STORAGE "ad.tape.save_storage"
#define ADPROF_AD_TAPE_RELEASE_STORAGE "ad.tape.release_storage"
#define ADPROF_AD_TAPE_LAYER_BEGIN "ad.tape.layer_begin"
#define ADPROF_AD_TAPE_LAYER_END "ad.tape.layer_end"
#define ADPROF_AD_TAPE_LAYER_BACKWARD "ad.tape.layer_backward"
#define ADPROF_AD_TAPE_GRAD_ARRIVED "ad.tape.grad_arrived"
#define ADPROF_AD_TAPE_GRAD_READY "ad.tape.grad_ready"
#define ADPROF_AD_TAPE_GRAD_ZEROED "ad.tape.grad_zeroed"
#define ADPROF_AD_TAPE_OPTIMIZER_BEGIN "ad.tape.optimizer_begin"
#define ADPROF_AD_TAPE_OPTIMIZER_END "ad.tape.optimizer_end"

/* ad.tape.save's slot for the node's output. */
#define ADPROF_AD_SAVE_OUTPUT 31

/* ad.tape.backward_begin's flags. */
#define ADPROF_AD_BACKWARD_TO_LEAF_GRADS 1u /* gradients go to the leaves (a .grad field) */
#define ADPROF_AD_BACKWARD_IN_CALL 2u       /* inside one call that returns value and gradients */
#define ADPROF_AD_BACKWARD_OPTIMIZER 4u     /* an optimizer was given (fused steps possible) */

/* ad.tape.contribution's modes. */
typedef enum adprof_ad_contribution {
  ADPROF_AD_CONTRIBUTION_ADOPTED = 0,      /* became the adjoint as is (maybe shared) */
  ADPROF_AD_CONTRIBUTION_INPLACE = 1,      /* added in place into the adjoint */
  ADPROF_AD_CONTRIBUTION_OUT_OF_PLACE = 2, /* added out of place: a new adjoint */
  ADPROF_AD_CONTRIBUTION_DEFERRED = 3,     /* copied into a pending buffer, summed later */
} adprof_ad_contribution;

/* ---------------- arenas (version 4) ----------------
 *
 * A compiled program whose runtime allocates one block per call (the arena) and runs every
 * temporary of the call inside it, at offsets the compiler chose ahead of time. The engine
 * describes the division once, and announces each call; the analysis then shows the arena as
 * the logical buffers it holds (profiler/analysis/include/adprof/arena_slicer.h says how).
 * Layout ids are the engine's, unique in the process. Schedule positions are the compiler's
 * (0 .. schedule length - 1, in the order it runs the program's instructions).
 *
 * "ad.arena.layout": {layout, bytes, slices, fullest position, schedule length,
 *                     program name (name id), label of the free bytes (name id)}
 *   the arena of a program: its size, how many ad.arena.slice events follow, and the schedule
 *   position where it holds the most (the analysis walks the whole schedule, and takes the
 *   most itself since version 6).
 *
 * "ad.arena.slice": {layout, offset, bytes, role (adprof_role), phase (adprof_phase),
 *                    op (name id), label (name id), live from, live to (positions, inclusive),
 *                    source argument, source offset, dtype (adprof_dtype; 0: unknown),
 *                    dimensions x up to 20}
 *   one logical buffer: bytes [offset, offset + bytes) of the arena hold it from `live from` to
 *   `live to`. A duplicate names its source: an index into the call's argument addresses
 *   (ad.arena.call), or an offset in the same arena; ADPROF_AD_NONE: none.
 *
 * "ad.arena.call": {layout, call number, argument address x up to 30}
 *   a call of the program is about to run: the next heap allocation of exactly the layout's
 *   bytes, by any thread, before the call's ad.arena.call_end, is its arena. The addresses are
 *   the arguments the layout's slices name as sources, in the order of their indices.
 *
 * "ad.arena.call_end": {layout}
 *   the call returned (its arena is freed by then or later).
 *
 * Version 6: what-ifs the engine predicts itself (from the compiler's own schedule), which the
 * what-if analysis applies to the recording as it applies its own plans:
 *
 * "ad.arena.whatif": {layout, policy id, bytes}
 *   with the policy on, every call's arena of this layout would be `bytes`, with what the
 *   engine says the call would hold beside it at the same time (with checkpointing: the
 *   forward the returned value needs, in buffers of its own) (a what-if replaces the blocks
 *   the arena was cut into by one block of that size, for the arena's life). Sent after the
 *   layout; the last one for a (layout, policy) counts.
 *
 * "ad.result_in_argument": {policy id, result address, argument address}
 *   with the policy on, the live result at `result address` would have been written into the
 *   buffer of the argument at `argument address` (the argument given up for it): a what-if
 *   never allocates the result, and keeps the argument's buffer until the result dies. Sent
 *   after the call returned, while both are live, once per such result.
 */
#define ADPROF_AD_ARENA_LAYOUT "ad.arena.layout"
#define ADPROF_AD_ARENA_SLICE "ad.arena.slice"
#define ADPROF_AD_ARENA_CALL "ad.arena.call"
#define ADPROF_AD_ARENA_CALL_END "ad.arena.call_end"
#define ADPROF_AD_ARENA_WHATIF "ad.arena.whatif"
#define ADPROF_AD_RESULT_IN_ARGUMENT "ad.result_in_argument"

/* ---------------- other AD facts ----------------
 *
 * label "ad.index_widened": the buffer is an index array copied into a wider integer type
 *   (a duplicate of the narrower one, policy no_index_widening off).
 * label "ad.arena.idle": the buffer is idle in the engine's arena, kept for the next call
 *   (policy reusable_tape); role workspace while idle.
 * "ad.device.oom": {requested, reserved, allocated, limit, device, live bytes by role x
 *                   ADPROF_ROLE_COUNT (adprof_role order)}
 *   a device allocator could not serve a request (the bytes are the allocator's own account).
 */
#define ADPROF_AD_LABEL_INDEX_WIDENED "ad.index_widened"
#define ADPROF_AD_LABEL_ARENA_IDLE "ad.arena.idle"
#define ADPROF_AD_DEVICE_OOM "ad.device.oom"

/* ---------------- helpers for emitters ---------------- */

/* Describes the engine: call once, then adprof_ad_describe_policy for each policy it has. */
static inline void adprof_ad_describe_engine(const char *name, const char *version) {
  const uint64_t v[3] = {ADPROF_AD_PROTOCOL_VERSION, adprof_name(name), adprof_name(version)};
  adprof_annotate(adprof_name(ADPROF_AD_ENGINE), v, 3);
}

static inline void adprof_ad_describe_policy(adprof_ad_policy policy, int on, const char *switch_on,
                                             const char *switch_off) {
  const uint64_t v[4] = {(uint64_t)policy, on ? 1u : 0u, adprof_name(switch_on),
                         adprof_name(switch_off)};
  adprof_annotate(adprof_name(ADPROF_AD_POLICY), v, 4);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ADPROF_AD_PROTOCOL_H */
