"""XLA's own account of a compiled module, read from the files XLA writes with
--xla_dump_to=DIR --xla_dump_hlo_as_text (the files the seed read by hand):

  module_NNNN.NAME.<platform>_after_optimizations.txt            the scheduled HLO (op_name)
  ...after_optimizations-buffer-assignment.txt                   allocations and their values
  ...after_optimizations-buffer-assignment-values.txt            each value's uses
  ...after_optimizations-live-range.txt                          the schedule, live ranges

Why the dump and not the runtime: jaxlib exposes a compiled module's HLO and four totals
(memory_analysis), not its buffer assignment; the dump is XLA's own text of it, the same on
every platform and version that has --xla_dump_to. The parser takes what it knows and skips
lines it does not (XLA adds fields over versions); a module whose files are missing or unreadable
gives None, and the integration then says so instead of guessing.
"""

import os
import re
from dataclasses import dataclass, field

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*)$")
_VALUE = re.compile(r"^ value: <(\d+) ([^ >{]+)(\{[^}]*\})?[^>]*> \(size=(\d+),offset=(\d+)\): (.*)$")
_PARAMETER = re.compile(r"parameter (\d+)")
_INSTRUCTION = re.compile(r"^\s*(ROOT )?%([^ ]+) = (.*?) ([a-z][a-z0-9-]*)\((.*)$")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_OPERAND = re.compile(r"%([A-Za-z0-9_.\-]+)")
_COMPUTATION = re.compile(r"^(ENTRY )?%([^ ]+) ")
_CALLS = re.compile(r"calls=%([A-Za-z0-9_.\-]+)")
_LIVE = re.compile(r"^\s+([^ {]+)(\{[^}]*\}):(\d+)-(\d+)$")
_SEQUENCE = re.compile(r"^\s+(\d+):(\S+)$")
_USE = re.compile(r"^\s+([^ ,]+), operand (\d+)")


@dataclass
class Instruction:
    name: str
    opcode: str
    shape: str
    operands: list
    op_name: str = ""
    calls: str = ""  # a fusion's computation
    parameter: int = -1  # a parameter's number


@dataclass
class Value:
    id: int
    instruction: str
    index: str  # shape index, "{}" for a non-tuple
    size: int
    offset: int
    shape: str
    uses: list = field(default_factory=list)  # instruction names
    live: tuple = None  # (first, last) schedule positions, inclusive; None: unknown


@dataclass
class Allocation:
    index: int
    size: int
    kind: str  # "parameter", "output", "constant", "thread-local", "temp", "tuple"
    parameter: int = -1
    values: list = field(default_factory=list)


@dataclass
class ModuleDump:
    name: str
    prefix: str  # the files' common path prefix
    allocations: list
    instructions: dict  # name -> Instruction (every computation's)
    computations: dict  # name -> [instruction names]
    sequence: list  # the entry's schedule: instruction names by position
    schedule_length: int

    def temps(self):
        return [a for a in self.allocations if a.kind == "temp" and a.size > 0]

    def per_call(self, min_output_bytes):
        """The allocations the runtime makes for each call and the compiler divided: the temp
        arena(s), and the results' own blocks of at least min_output_bytes."""
        return [a for a in self.allocations if a.size > 0 and a.values and
                (a.kind == "temp" or (a.kind == "output" and a.size >= min_output_bytes))]


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def find_module_files(dump_dir, module_name, seen):
    """The prefix of the newest after-optimizations dump of `module_name` in dump_dir not in
    `seen` (a set of prefixes already taken), or None."""
    try:
        names = os.listdir(dump_dir)
    except OSError:
        return None
    suffix = "_after_optimizations-buffer-assignment.txt"
    best = None
    for n in names:
        if not n.endswith(suffix):
            continue
        # module_NNNN.NAME.<platform>_after_optimizations-buffer-assignment.txt
        head = n[: -len(suffix)]
        stem, _, _platform = head.rpartition(".")
        parts = stem.split(".", 1)
        if len(parts) != 2 or parts[1] != module_name:
            continue
        prefix = os.path.join(dump_dir, head + "_after_optimizations")
        if prefix in seen:
            continue
        if best is None or n > best[0]:
            best = (n, prefix)
    return best[1] if best else None


def parse(prefix, module_name):
    """The ModuleDump of the files at `prefix`, or None if they cannot be read."""
    try:
        assignment = _read(prefix + "-buffer-assignment.txt")
        values_text = _read(prefix + "-buffer-assignment-values.txt")
        live_text = _read(prefix + "-live-range.txt")
        hlo_text = _read(prefix + ".txt")
    except OSError:
        return None
    allocations = []
    current = None
    for line in assignment:
        m = _ALLOCATION.match(line)
        if m:
            rest = m.group(3)
            if "parameter" in rest and _PARAMETER.search(rest):
                kind, param = "parameter", int(_PARAMETER.search(rest).group(1))
            elif "constant" in rest:
                kind, param = "constant", -1
            elif "thread-local" in rest:
                kind, param = "thread-local", -1
            elif "output shape is" in rest and "(" in rest.split("|")[1]:
                kind, param = "tuple", -1
            elif "maybe-live-out" in rest or "output shape" in rest:
                kind, param = "output", -1
            else:
                kind, param = "temp", -1
            current = Allocation(int(m.group(1)), int(m.group(2)), kind, param)
            allocations.append(current)
            continue
        m = _VALUE.match(line)
        if m and current is not None:
            current.values.append(Value(int(m.group(1)), m.group(2), m.group(3) or "{}",
                                        int(m.group(4)), int(m.group(5)), m.group(6)))
    if not allocations:
        return None
    by_id = {v.id: v for a in allocations for v in a.values}
    value = None
    in_uses = False
    for line in values_text:
        if line.startswith("<"):
            vid = line[1:].split(" ", 1)[0]
            value = by_id.get(int(vid)) if vid.isdigit() else None
            in_uses = False
        elif line.strip() == "uses:":
            in_uses = True
        elif line.startswith(" from instruction") or line.strip() == "positions:":
            in_uses = False
        elif in_uses and value is not None:
            m = _USE.match(line)
            if m:
                value.uses.append(m.group(1))
    sequence, live = [], {}
    for line in live_text:
        m = _SEQUENCE.match(line)
        if m:
            sequence.append(m.group(2))
            continue
        m = _LIVE.match(line)
        if m:
            live[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
    for a in allocations:
        for v in a.values:
            v.live = live.get((v.instruction, v.index))
    instructions, computations = {}, {}
    computation = None
    for line in hlo_text:
        m = _COMPUTATION.match(line)
        if m and line.rstrip().endswith("{"):
            computation = m.group(2)
            computations[computation] = []
            continue
        m = _INSTRUCTION.match(line)
        if m and computation is not None:
            name, shape, opcode, rest = m.group(2), m.group(3), m.group(4), m.group(5)
            args = rest.split(")", 1)[0]
            op = _OP_NAME.search(rest)
            calls = _CALLS.search(rest)
            instructions[name] = Instruction(name, opcode, shape, _OPERAND.findall(args),
                                             op.group(1) if op else "",
                                             calls.group(1) if calls else "",
                                             int(args) if args.strip().isdigit() else -1)
            computations[computation].append(name)
    return ModuleDump(module_name, prefix, allocations, instructions, computations, sequence,
                      len(sequence))
