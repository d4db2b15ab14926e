// A small, bounded reader and writer for the subset of Python's pickle format that holds plain
// data: None, bools, ints, floats, strings, bytes, lists, tuples, sets and dicts, with the memo
// (shared references). That is all a PyTorch memory snapshot is made of
// (`torch.cuda.memory._dump_snapshot`: `pickle.dump` of dicts and lists). Protocols 0 to 5 are
// read (protocol 0/1's text opcodes only for ints and memo keys); anything that names or builds
// a Python object (GLOBAL, REDUCE, BUILD, NEWOBJ, persistent ids, out-of-band buffers) is refused:
// nothing in a file can make the reader run code or allocate without bound.
//
// Bounds: the file is mapped read-only and strings are views into it; each opcode makes at most
// one 16-byte node, and a file may make at most kMaxNodes of them; every length is checked
// against the bytes left before it is used; a container's nesting is never walked recursively
// by the reader (memo references can make cycles: a walker must follow a fixed schema).
// Encoding reference: Python's Lib/pickletools.py (opcode table and argument formats).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace adprof::pickle {

// A file that is not a pickle, or a pickle outside the subset: what() is one line, with the
// byte offset where reading stopped.
struct PickleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr uint8_t kProtoOpcode = 0x80;  // PROTO: the first byte of protocol 2+ pickles
inline constexpr uint64_t kMaxNodes = uint64_t{1} << 28;

enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kBytes, kList, kTuple, kDict };

class Document;

// A value of the document; cheap to copy (a document and an index).
class Value {
 public:
  Value() = default;
  Kind kind() const;
  bool is(Kind k) const { return doc_ && kind() == k; }
  bool valid() const { return doc_ != nullptr; }
  // Ints (and bools) as int64; an int out of int64's range is not an int here (is_int false).
  bool is_int() const { return is(Kind::kInt) || is(Kind::kBool); }
  int64_t as_int(int64_t fallback = 0) const;
  double as_number(double fallback = 0) const;  // an int or a float
  std::string_view as_string() const;           // a string or bytes; "" otherwise
  // Lists, tuples (and sets): their items; dicts: their values. size() 0 for scalars.
  size_t size() const;
  Value at(size_t i) const;
  // A dict's value under a string key; an invalid Value when absent or not a dict.
  Value get(std::string_view key) const;
  // A dict's i-th key.
  Value key_at(size_t i) const;

 private:
  friend class Document;
  Value(const Document *doc, uint32_t index) : doc_(doc), index_(index) {}
  const Document *doc_ = nullptr;
  uint32_t index_ = 0;
};

class Document {
 public:
  // Throws PickleError (a file that cannot be opened: std::runtime_error with its reason).
  static std::unique_ptr<Document> parse_file(const std::string &path);
  static std::unique_ptr<Document> parse(std::string bytes);
  ~Document();
  Document(const Document &) = delete;
  Document &operator=(const Document &) = delete;

  Value root() const { return Value(this, root_); }
  int protocol() const { return protocol_; }

 private:
  friend class Value;
  friend class Parser;
  Document() = default;
  struct Node {
    uint64_t a = 0;  // int bits, double bits, or a string's offset
    uint32_t b = 0;  // a string's length, or a container's index
    Kind kind = Kind::kNone;
  };
  std::string_view text(const Node &n) const { return std::string_view(data_ + n.a, n.b); }

  const char *data_ = nullptr;
  size_t size_ = 0;
  void *mapping_ = nullptr;  // munmap'd by the destructor
  std::string owned_;        // parse(): the bytes
  std::vector<Node> nodes_;
  // Containers' items by node index; a dict's as key, value, key, value...
  std::vector<std::vector<uint32_t>> containers_;
  uint32_t root_ = 0;
  int protocol_ = 0;
};

// Writes protocol 4 without framing (optional in protocol 4; Python's loader accepts it), the
// opcodes of the subset above. Values are written as a stream of calls, as pickle's own
// writer emits them; repeated strings and whole values can be memoized and referenced again.
class Writer {
 public:
  Writer();
  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  void string(std::string_view s);
  // A string written once and referenced by its memo slot afterwards (keys, repeated names).
  void shared_string(const std::string &s);
  // Containers: their items are the values written between begin and end (a dict's: key,
  // value, key, value...).
  void begin_list();  // EMPTY_LIST MARK ... APPENDS at end_list()
  void end_list();
  void begin_dict();  // EMPTY_DICT MARK ... SETITEMS at end_dict()
  void end_dict();
  void tuple2();  // the last two values written become a tuple
  // Memoizes the value just completed; returns its slot for get().
  uint32_t memoize();
  void get(uint32_t slot);
  std::string finish();  // STOP; the bytes

 private:
  void op(uint8_t code) { out_.push_back(static_cast<char>(code)); }
  void u32(uint32_t v);
  std::string out_;
  uint32_t memo_ = 0;
  std::unordered_map<std::string, uint32_t> strings_;  // shared_string's memo slots
};

}  // namespace adprof::pickle
