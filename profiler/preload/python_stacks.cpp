// Python frames in call stacks (python_stacks.h; docs/STACKS.md, "Python frames").
//
// The technique is memray's: CPython calls a C profile function (PyEval_SetProfile, per thread)
// on every Python function's entry and exit; it keeps the thread's shadow stack of (frame, code
// name, line) entries. An allocation reads the shadow stack and asks CPython for the innermost
// frame's current line; the line of every outer frame is the line of its call, noted when the
// callee entered. Nothing of CPython's internal structures is read except the thread state's
// profile function (found at install: its offset is where PyEval_SetProfile wrote it), checked
// on every capture so that a program that replaces the profile function (sys.setprofile,
// cProfile) is never read through stale frames: its allocations then get native frames only.
// CPython's functions are found with dlsym: the preload links no libpython.
#include "python_stacks.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "preload_internal.h"

extern "C" uint32_t adprof_name(const char *name);

namespace adprof::preload {

extern bool g_stacks;

namespace {

using PyObject = void;
using ProfileFunction = int (*)(PyObject *, PyObject *, int, PyObject *);
constexpr int kPyTraceCall = 0, kPyTraceReturn = 3;

// The CPython API the shadow stack needs (stable since 3.9; the versions are checked).
struct Api {
  void (*set_profile)(ProfileFunction, PyObject *);
  int (*line_number)(PyObject *frame);
  PyObject *(*get_frame)();                  // borrowed
  PyObject *(*frame_back)(PyObject *frame);  // new reference
  PyObject *(*frame_code)(PyObject *frame);  // new reference
  PyObject *(*thread_state)();
  PyObject *(*get_attr)(PyObject *, PyObject *);
  PyObject *(*intern)(const char *);
  long (*unicode_length)(PyObject *);
  uint32_t *(*as_ucs4)(PyObject *, uint32_t *, long, int);
  void (*decref)(PyObject *);
  void (*clear_error)();
};
Api g_api;
PyObject *g_qualname = nullptr, *g_filename = nullptr;  // interned attribute names
uint64_t g_eval_start = 0, g_eval_end = 0;              // _PyEval_EvalFrameDefault's code
long g_profile_offset = -1;                             // of the profile function in a thread state
int g_state = 0;                                        // 0: not tried, 1: ready, -1: unsupported

constexpr uint32_t kMaxDepth = 1024;
constexpr uint32_t kCodeCacheSlots = 1024;

struct Entry {
  PyObject *frame;
  uint64_t name;    // the code object's name id (adprof_name)
  uint64_t line;    // the line of its call to the next entry's function
  uint64_t prefix;  // the hash of the entries outward of it, with their lines
};
// A code object's name id, cached by its address and those of its name and file: a code
// object's memory is reused once it is freed (a class body's, a module's after its import), by
// another code object, which then has other strings (or the same, and then the same name).
struct CodeName {
  PyObject *code, *qualname, *filename;
  uint32_t name;
};

}  // namespace

struct PyShadow {
  PyObject *tstate;
  uint32_t depth;  // may exceed kMaxDepth: the frames past it are counted, not kept
  bool off;        // the profile function was replaced: native frames only from now on
  uint64_t top_line;
  Entry entries[kMaxDepth];
  CodeName codes[kCodeCacheSlots];
};

namespace {

constexpr uint64_t kSeed = 0x452821E638D01377ull;
inline uint64_t mix(uint64_t h, uint64_t value) {
  return ((h << 23 | h >> 41) ^ value) * 0x9E3779B97F4A7C15ull;
}

// trace_format.h, "Python frames": bit 63, the code's name id, the line.
inline uint64_t frame_value(uint64_t name, uint64_t line) {
  return fmt::kPythonFrameTag | (name & fmt::kPythonNameMask) << fmt::kPythonLineBits |
         (line < fmt::kPythonLineMask ? line : fmt::kPythonLineMask);
}

uint64_t line_of(PyObject *frame) {
  const int line = g_api.line_number(frame);
  return line > 0 ? static_cast<uint64_t>(line) : 0;
}

// UTF-8 of a str object, into out[0, cap): copied as UCS-4 into a buffer of ours (no
// allocation of CPython's); false when it is longer than the buffer.
bool utf8_of(PyObject *text, char *out, size_t cap, size_t *used) {
  constexpr long kMaxChars = 1024;
  uint32_t chars[kMaxChars];
  const long n = g_api.unicode_length(text);
  if (n < 0 || n > kMaxChars || !g_api.as_ucs4(text, chars, kMaxChars, 0)) {
    g_api.clear_error();
    return false;
  }
  size_t at = *used;
  for (long i = 0; i < n; ++i) {
    const uint32_t c = chars[i];
    if (at + 4 >= cap) return false;
    if (c < 0x80) {
      out[at++] = c ? static_cast<char>(c) : '?';
    } else if (c < 0x800) {
      out[at++] = static_cast<char>(0xC0 | c >> 6);
      out[at++] = static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out[at++] = static_cast<char>(0xE0 | c >> 12);
      out[at++] = static_cast<char>(0x80 | (c >> 6 & 0x3F));
      out[at++] = static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out[at++] = static_cast<char>(0xF0 | c >> 18);
      out[at++] = static_cast<char>(0x80 | (c >> 12 & 0x3F));
      out[at++] = static_cast<char>(0x80 | (c >> 6 & 0x3F));
      out[at++] = static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  *used = at;
  return true;
}

// A code object's attribute (a str it holds: alive as long as the code object).
PyObject *attr_of(PyObject *code, PyObject *attr) {
  PyObject *value = g_api.get_attr(code, attr);
  if (!value) {
    g_api.clear_error();
    return nullptr;
  }
  g_api.decref(value);
  return value;
}

// The name id of a frame's code object: fmt::kPythonCodePrefix, qualified name, '\x01', file
// (trace_format.h, "Python frames"); cached per thread by the code object's address.
uint64_t name_of(PyShadow &s, PyObject *frame) {
  PyObject *code = g_api.frame_code(frame);
  if (!code) {
    g_api.clear_error();
    return 0;
  }
  g_api.decref(code);  // the frame holds it
  PyObject *qualname = attr_of(code, g_qualname), *filename = attr_of(code, g_filename);
  if (!qualname || !filename) return 0;
  CodeName &slot = s.codes[(reinterpret_cast<uintptr_t>(code) >> 4) & (kCodeCacheSlots - 1)];
  if (slot.code == code && slot.qualname == qualname && slot.filename == filename) return slot.name;
  char text[fmt::kMaxNameBytes];
  size_t used = strlen(fmt::kPythonCodePrefix);
  memcpy(text, fmt::kPythonCodePrefix, used);
  if (!utf8_of(qualname, text, sizeof text, &used)) return 0;
  text[used++] = '\x01';
  if (!utf8_of(filename, text, sizeof text - 1, &used)) return 0;
  text[used] = '\0';
  slot = {code, qualname, filename, adprof_name(text)};
  return slot.name;
}

void push(PyShadow &s, PyObject *frame) {
  const uint32_t d = s.depth;
  if (d < kMaxDepth) {
    uint64_t prefix = kSeed;
    if (d > 0) {
      Entry &caller = s.entries[d - 1];
      caller.line = line_of(caller.frame);
      prefix = mix(caller.prefix, frame_value(caller.name, caller.line));
    }
    s.entries[d] = {frame, name_of(s, frame), 0, prefix};
  }
  s.depth = d + 1;
}

void pop(PyShadow &s, PyObject *frame) {
  if (s.depth == 0) return;  // a frame entered before the profile function was installed
  if (s.depth > kMaxDepth) {
    --s.depth;
    return;
  }
  for (uint32_t i = s.depth; i-- > 0;)
    if (s.entries[i].frame == frame) {
      s.depth = i;  // the frames inward of it left without telling (none in CPython's order)
      return;
    }
}

int profile(PyObject *, PyObject *frame, int what, PyObject *) {
  PyShadow *s = t_state.python;
  if (!s || !frame) return 0;
  if (what == kPyTraceCall)
    push(*s, frame);
  else if (what == kPyTraceReturn)
    pop(*s, frame);
  return 0;
}

void *find(const char *name) { return dlsym(RTLD_DEFAULT, name); }

// The CPython of this process, checked once: 3.11 to 3.13 (docs/STACKS.md).
int resolve_api() {
  auto version = reinterpret_cast<const char *(*)()>(find("Py_GetVersion"));
  if (!version) return -1;
  int major = 0, minor = 0;
  if (sscanf(version(), "%d.%d", &major, &minor) != 2 || major != 3 || minor < 11 || minor > 13)
    return -1;
  g_api.set_profile = reinterpret_cast<decltype(g_api.set_profile)>(find("PyEval_SetProfile"));
  g_api.line_number = reinterpret_cast<decltype(g_api.line_number)>(find("PyFrame_GetLineNumber"));
  g_api.get_frame = reinterpret_cast<decltype(g_api.get_frame)>(find("PyEval_GetFrame"));
  g_api.frame_back = reinterpret_cast<decltype(g_api.frame_back)>(find("PyFrame_GetBack"));
  g_api.frame_code = reinterpret_cast<decltype(g_api.frame_code)>(find("PyFrame_GetCode"));
  g_api.thread_state = reinterpret_cast<decltype(g_api.thread_state)>(find("PyThreadState_Get"));
  g_api.get_attr = reinterpret_cast<decltype(g_api.get_attr)>(find("PyObject_GetAttr"));
  g_api.intern = reinterpret_cast<decltype(g_api.intern)>(find("PyUnicode_InternFromString"));
  g_api.unicode_length =
      reinterpret_cast<decltype(g_api.unicode_length)>(find("PyUnicode_GetLength"));
  g_api.as_ucs4 = reinterpret_cast<decltype(g_api.as_ucs4)>(find("PyUnicode_AsUCS4"));
  g_api.decref = reinterpret_cast<decltype(g_api.decref)>(find("Py_DecRef"));
  g_api.clear_error = reinterpret_cast<decltype(g_api.clear_error)>(find("PyErr_Clear"));
  if (!g_api.set_profile || !g_api.line_number || !g_api.get_frame || !g_api.frame_back ||
      !g_api.frame_code || !g_api.thread_state || !g_api.get_attr || !g_api.intern ||
      !g_api.unicode_length || !g_api.as_ucs4 || !g_api.decref || !g_api.clear_error)
    return -1;
  g_qualname = g_api.intern("co_qualname");
  g_filename = g_api.intern("co_filename");
  if (!g_qualname || !g_filename) return -1;
  // The eval loop's code: Python frames go where the native stack enters it.
  if (void *eval = find("_PyEval_EvalFrameDefault")) {
    Dl_info info;
    ElfW(Sym) *symbol = nullptr;
    if (dladdr1(eval, &info, reinterpret_cast<void **>(&symbol), RTLD_DL_SYMENT) && symbol) {
      g_eval_start = reinterpret_cast<uintptr_t>(eval);
      g_eval_end = g_eval_start + symbol->st_size;
    }
  }
  return 1;
}

}  // namespace

uint64_t python_stack_hash(ThreadState &ts, uint64_t native) {
  PyShadow &s = *ts.python;
  if (s.off || s.depth == 0) return native;
  if (ADPROF_UNLIKELY(*reinterpret_cast<ProfileFunction *>(static_cast<char *>(s.tstate) +
                                                           g_profile_offset) != &profile)) {
    s.off = true;  // replaced (sys.setprofile): the entries may name frames that are gone
    return native;
  }
  const Entry &top = s.entries[(s.depth < kMaxDepth ? s.depth : kMaxDepth) - 1];
  s.top_line = line_of(top.frame);
  const uint64_t h = mix(mix(native, top.prefix), frame_value(top.name, s.top_line));
  return h ? h : 1;
}

int splice_python_frames(ThreadState &ts, uint64_t *frames, int count) {
  const PyShadow *s = ts.python;
  if (!s || s->off || s->depth == 0) return count;
  int at = 0;
  while (at < count && !(frames[at] >= g_eval_start && frames[at] < g_eval_end)) ++at;
  const int most = static_cast<int>(fmt::kMaxStackFrames);
  int i = static_cast<int>(s->depth < kMaxDepth ? s->depth : kMaxDepth) - 1;
  frames[at < most ? at++ : most - 1] = frame_value(s->entries[i].name, s->top_line);
  while (--i >= 0 && at < most) frames[at++] = frame_value(s->entries[i].name, s->entries[i].line);
  return at;
}

void release_python_shadow(ThreadState &ts) {
  if (!ts.python) return;
  PyShadow *s = ts.python;
  ts.python = nullptr;
  syscall(SYS_munmap, s, sizeof(PyShadow));
}

}  // namespace adprof::preload

using namespace adprof::preload;

// Called by python/adprof/_pystacks.py through ctypes.PyDLL (the GIL held), on each thread
// that runs Python: installs the profile function on the calling thread and fills its shadow
// stack with the frames it is in now, less the innermost `skip` (a profile hook's own frame,
// which never returns through the profile function). 1: on; 0: not recording stacks; -1: this
// CPython is not supported (native frames only); -2: it could not be set up.
extern "C" __attribute__((visibility("default"))) int adprof_python_stacks_thread(int skip) {
  if (!g_stacks || !recording()) return 0;
  if (g_state == 0) g_state = resolve_api();
  if (g_state < 0) return g_state;
  ThreadState &ts = t_state;
  PyShadow *s = ts.python;
  if (!s) {
    const long r = syscall(SYS_mmap, nullptr, sizeof(PyShadow), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == -1) return -2;
    s = reinterpret_cast<PyShadow *>(r);
  }
  s->depth = 0;
  s->off = true;  // until the profile function is in place
  s->tstate = g_api.thread_state();
  ts.python = s;
  g_api.set_profile(&profile, nullptr);
  if (g_profile_offset < 0) {
    // Where PyEval_SetProfile put it in the thread state (PyThreadState.c_profilefunc).
    for (long at = 0; at < 512; at += sizeof(void *))
      if (*reinterpret_cast<ProfileFunction *>(static_cast<char *>(s->tstate) + at) == &profile) {
        g_profile_offset = at;
        break;
      }
    if (g_profile_offset < 0) {
      g_api.set_profile(nullptr, nullptr);
      ts.python = nullptr;
      syscall(SYS_munmap, s, sizeof(PyShadow));
      g_state = -2;
      return -2;
    }
  }
  // The frames it is in now, outermost first.
  PyObject *stack[kMaxDepth];
  uint32_t n = 0;
  for (PyObject *f = g_api.get_frame(); f && n < kMaxDepth;) {
    if (skip > 0)
      --skip;
    else
      stack[n++] = f;
    PyObject *back = g_api.frame_back(f);
    if (back) g_api.decref(back);  // alive: it is on the thread's stack
    f = back;
  }
  while (n > 0) push(*s, stack[--n]);
  s->off = false;
  return 1;
}
