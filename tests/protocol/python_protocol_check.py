#!/usr/bin/env python3
"""protocol.python_matches_headers: python/adprof/_protocol.py against the C headers.

_protocol.py copies the numbers and names of profiler/include/adprof/context.h and
ad_protocol.h by value (the Python side binds the context API with ctypes and cannot include
them). Every constant NAME there must be the headers' ADPROF_NAME with the same value, and
ROLE_NAMES / PHASE_NAMES must list the adprof_role / adprof_phase enums in order, as many as
ADPROF_ROLE_COUNT / ADPROF_PHASE_COUNT. Then the check is run again on copies of the module with
each value changed in turn, and must catch every one (a check that cannot fail holds nothing).

Usage: python_protocol_check.py HEADER_DIR MODULE.py [--no-self-test]
Exit 0: all match; 1: a mismatch (one line per constant); 2: unreadable input.
"""

import os
import re
import sys

_ENUM = re.compile(r"^\s*(ADPROF_[A-Z0-9_]+)\s*=\s*(\d+)\s*,", re.M)
_DEFINE = re.compile(r"^#define\s+(ADPROF_[A-Z0-9_]+)\s+([^/\n]+?)\s*(?:/\*.*)?$", re.M)
_ALL_ONES = re.compile(r"^\(~\(uint64_t\)0\)$")


def header_values(header_dir):
    """ADPROF_* name -> value (int or str) from the enums and object-like #defines."""
    values = {}
    for name in sorted(os.listdir(header_dir)):
        if not name.endswith(".h"):
            continue
        with open(os.path.join(header_dir, name), encoding="utf-8") as f:
            text = f.read()
        for m in _ENUM.finditer(text):
            values[m.group(1)] = int(m.group(2))
        for m in _DEFINE.finditer(text):
            raw = m.group(2).strip()
            if raw.startswith('"') and raw.endswith('"'):
                values[m.group(1)] = raw[1:-1]
            elif re.fullmatch(r"\d+u?", raw):
                values[m.group(1)] = int(raw.rstrip("u"))
            elif _ALL_ONES.match(raw):
                values[m.group(1)] = (1 << 64) - 1
    return values


def module_values(text):
    """The module's constants, by executing it (it holds assignments of literals only)."""
    namespace = {}
    exec(compile(text, "_protocol.py", "exec"), namespace)
    return {k: v for k, v in namespace.items()
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", k) and isinstance(v, (int, str, tuple))}


def enum_names(headers, prefix):
    """The names of an enum's members in the order of their values, lower case, without
    the prefix: ADPROF_ROLE_FORWARD_CACHE = 4 -> names[4] == "forward_cache"."""
    members = {v: k[len(prefix):].lower() for k, v in headers.items()
               if k.startswith(prefix) and not k.endswith("_COUNT") and isinstance(v, int)}
    return tuple(members[i] for i in sorted(members))


def mismatches(headers, constants):
    """One line per constant of the module that the headers do not hold as it is."""
    out = []
    for name, value in sorted(constants.items()):
        if isinstance(value, tuple):
            kind = name[:-len("_NAMES")] if name.endswith("_NAMES") else None
            count = headers.get(f"ADPROF_{kind}_COUNT") if kind else None
            expected = enum_names(headers, f"ADPROF_{kind}_") if count is not None else None
            if expected is None:
                out.append(f"{name}: no adprof_{(kind or name).lower()} enum with a "
                           f"ADPROF_{kind}_COUNT in the headers")
            elif value != expected or len(value) != count:
                out.append(f"{name} = {value!r}; the headers' enum in order: {expected!r} "
                           f"(ADPROF_{kind}_COUNT {count})")
            continue
        c_name = "ADPROF_" + name
        if c_name not in headers:
            out.append(f"{name}: the headers define no {c_name}")
        elif headers[c_name] != value or type(headers[c_name]) is not type(value):
            out.append(f"{name} = {value!r}; the headers' {c_name} = {headers[c_name]!r}")
    return out


def changed(value):
    """A value that differs from `value` (of the same kind)."""
    if isinstance(value, tuple):
        return value[1:] + value[:1] if len(set(value)) > 1 else value + ("x",)
    if isinstance(value, str):
        return value + "x"
    return value + 1 if value < (1 << 64) - 1 else value - 1


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    self_test = "--no-self-test" not in argv
    if len(args) != 2:
        sys.stderr.write("usage: python_protocol_check.py HEADER_DIR MODULE.py "
                         "[--no-self-test]\n")
        return 2
    header_dir, module_path = args
    try:
        headers = header_values(header_dir)
        with open(module_path, encoding="utf-8") as f:
            constants = module_values(f.read())
    except (OSError, SyntaxError) as e:
        sys.stderr.write(f"python_protocol_check: cannot read the input: {e}\n")
        return 2
    if not headers or not constants:
        sys.stderr.write(f"python_protocol_check: no constants read (headers {len(headers)}, "
                         f"module {len(constants)})\n")
        return 2
    found = mismatches(headers, constants)
    for line in found:
        print(f"{module_path}: {line}")
    if found:
        return 1
    if self_test:
        missed = [name for name, value in constants.items()
                  if not mismatches(headers, dict(constants, **{name: changed(value)}))]
        if missed:
            print("the check would not notice a change of: " + ", ".join(sorted(missed)))
            return 1
    print(f"{len(constants)} constants of {os.path.basename(module_path)} match the headers"
          + (" (and a change of any one is caught)" if self_test else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
