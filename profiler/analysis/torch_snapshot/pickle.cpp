#include "pickle.h"

#include <absl/container/flat_hash_map.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

namespace adprof::pickle {

// ---- values --------------------------------------------------------------------------------

Kind Value::kind() const { return doc_ ? doc_->nodes_[index_].kind : Kind::kNone; }

int64_t Value::as_int(int64_t fallback) const {
  if (!is_int()) return fallback;
  return static_cast<int64_t>(doc_->nodes_[index_].a);
}

double Value::as_number(double fallback) const {
  if (is_int()) return static_cast<double>(as_int());
  if (is(Kind::kFloat)) return std::bit_cast<double>(doc_->nodes_[index_].a);
  return fallback;
}

std::string_view Value::as_string() const {
  if (!is(Kind::kString) && !is(Kind::kBytes)) return {};
  return doc_->text(doc_->nodes_[index_]);
}

size_t Value::size() const {
  if (!doc_) return 0;
  const Document::Node &n = doc_->nodes_[index_];
  if (n.kind == Kind::kList || n.kind == Kind::kTuple) return doc_->containers_[n.b].size();
  if (n.kind == Kind::kDict) return doc_->containers_[n.b].size() / 2;
  return 0;
}

Value Value::at(size_t i) const {
  if (i >= size()) return {};
  const Document::Node &n = doc_->nodes_[index_];
  const std::vector<uint32_t> &items = doc_->containers_[n.b];
  return Value(doc_, n.kind == Kind::kDict ? items[2 * i + 1] : items[i]);
}

Value Value::key_at(size_t i) const {
  if (!is(Kind::kDict) || i >= size()) return {};
  return Value(doc_, doc_->containers_[doc_->nodes_[index_].b][2 * i]);
}

Value Value::get(std::string_view key) const {
  if (!is(Kind::kDict)) return {};
  const std::vector<uint32_t> &items = doc_->containers_[doc_->nodes_[index_].b];
  // The last of equal keys wins, as in Python's dict.
  for (size_t i = items.size(); i >= 2; i -= 2) {
    const Document::Node &k = doc_->nodes_[items[i - 2]];
    if (k.kind == Kind::kString && doc_->text(k) == key) return Value(doc_, items[i - 1]);
  }
  return {};
}

// ---- reading -------------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(Document &doc) : d_(doc), p_(0), end_(doc.size_) {}

  void run() {
    if (end_ == 0) fail("the file is empty");
    for (;;) {
      if (p_ >= end_) fail("the pickle ends before its STOP opcode");
      const size_t at = p_;
      const uint8_t code = static_cast<uint8_t>(d_.data_[p_++]);
      if (step(code, at)) break;
    }
    if (stack_.size() != 1 || !marks_.empty())
      fail("STOP with " + std::to_string(stack_.size()) + " values on the stack (one expected)");
    d_.root_ = stack_.back();
  }

 private:
  [[noreturn]] void fail(const std::string &what) const {
    throw PickleError("byte " + std::to_string(p_) + ": " + what);
  }
  const char *take(uint64_t n) {
    if (n > end_ - p_) fail("an argument runs past the end of the file");
    const char *q = d_.data_ + p_;
    p_ += n;
    return q;
  }
  uint64_t le(size_t n) {
    const unsigned char *q = reinterpret_cast<const unsigned char *>(take(n));
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{q[i]} << (8 * i);
    return v;
  }
  std::string_view line() {  // protocol 0 arguments: up to '\n'
    const void *nl = memchr(d_.data_ + p_, '\n', end_ - p_);
    if (!nl) fail("a text argument has no end of line");
    size_t n = static_cast<size_t>(static_cast<const char *>(nl) - (d_.data_ + p_));
    std::string_view s(d_.data_ + p_, n);
    p_ += n + 1;
    return s;
  }
  uint32_t node(Kind kind, uint64_t a = 0, uint32_t b = 0) {
    if (d_.nodes_.size() >= kMaxNodes) fail("too many values (the reader's bound)");
    d_.nodes_.push_back({a, b, kind});
    return static_cast<uint32_t>(d_.nodes_.size() - 1);
  }
  uint32_t container(Kind kind) {
    d_.containers_.emplace_back();
    return node(kind, 0, static_cast<uint32_t>(d_.containers_.size() - 1));
  }
  void push(uint32_t n) { stack_.push_back(n); }
  uint32_t pop() {
    if (stack_.size() <= floor()) fail("a value is taken from an empty stack");
    uint32_t n = stack_.back();
    stack_.pop_back();
    return n;
  }
  uint32_t top() const {
    if (stack_.size() <= floor()) fail("a value is taken from an empty stack");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  void string(uint64_t n, Kind kind = Kind::kString) {
    if (n > UINT32_MAX) fail("a string longer than 4 GiB");
    const char *q = take(n);
    push(node(kind, static_cast<uint64_t>(q - d_.data_), static_cast<uint32_t>(n)));
  }
  void integer_bytes(uint64_t n) {  // LONG1 / LONG4: little-endian two's complement
    const unsigned char *q = reinterpret_cast<const unsigned char *>(take(n));
    const unsigned char sign = (n && (q[n - 1] & 0x80)) ? 0xFF : 0x00;
    bool fits = true;  // bytes past the eighth only repeat the sign, which bit 63 carries
    for (uint64_t i = 8; i < n; ++i) fits &= q[i] == sign;
    if (n > 8) fits &= ((q[7] & 0x80) ? 0xFF : 0x00) == sign;
    if (!fits) {  // out of int64: kept as a float, so that no int reads it
      push(node(Kind::kFloat, std::bit_cast<uint64_t>(0.0)));
      return;
    }
    uint64_t v = 0;
    for (uint64_t i = 0; i < 8; ++i) v |= uint64_t{i < n ? q[i] : sign} << (8 * i);
    push(node(Kind::kInt, v));
  }
  void text_int(std::string_view s) {
    if (s == "00" || s == "01") {
      push(node(Kind::kBool, s == "01"));
      return;
    }
    if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
    bool neg = !s.empty() && s[0] == '-';
    if (neg || (!s.empty() && s[0] == '+')) s.remove_prefix(1);
    if (s.empty() || s.size() > 18) fail("a text int out of range");
    int64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') fail("a text int that is not a number");
      v = v * 10 + (c - '0');
    }
    push(node(Kind::kInt, static_cast<uint64_t>(neg ? -v : v)));
  }
  std::vector<uint32_t> &items_of(uint32_t n, Kind want, const char *op) {
    const Document::Node &c = d_.nodes_[n];
    if (c.kind != want) fail(std::string(op) + " on a value of the wrong type");
    return d_.containers_[c.b];
  }
  void put(uint64_t key) {
    if (key > UINT32_MAX) fail("a memo key out of range");
    memo_[static_cast<uint32_t>(key)] = top();
  }
  void get(uint64_t key) {
    auto it = memo_.find(static_cast<uint32_t>(key));
    if (key > UINT32_MAX || it == memo_.end()) fail("a memo key that was never stored");
    push(it->second);
  }
  uint64_t text_key() {
    std::string_view s = line();
    if (s.empty() || s.size() > 10) fail("a bad memo key");
    uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') fail("a bad memo key");
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    return v;
  }
  // Moves the values above the last mark into a new container of `kind`.
  void collect(Kind kind) {
    size_t m = pop_mark();
    uint32_t c = container(kind);
    d_.containers_.back().assign(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    if (kind == Kind::kDict && d_.containers_.back().size() % 2) fail("DICT with an odd count");
    push(c);
  }
  void tuple_of(size_t n) {
    if (stack_.size() < floor() + n) fail("a tuple of values the stack does not hold");
    uint32_t c = container(Kind::kTuple);
    d_.containers_.back().assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    push(c);
  }

  // Returns true at STOP.
  bool step(uint8_t code, size_t at) {
    switch (code) {
      case 0x80: {  // PROTO
        uint64_t v = le(1);
        if (v > 5) fail("pickle protocol " + std::to_string(v) + " (this reader knows 0 to 5)");
        d_.protocol_ = static_cast<int>(v);
        return false;
      }
      case 0x95:  // FRAME: a length hint only
        le(8);
        return false;
      case '.':  // STOP
        return true;
      case '(':
        marks_.push_back(stack_.size());
        return false;
      case '0':
        pop();
        return false;
      case '1':
        stack_.resize(pop_mark());
        return false;
      case '2':
        push(top());
        return false;
      case 'N':
        push(node(Kind::kNone));
        return false;
      case 0x88:
      case 0x89:
        push(node(Kind::kBool, code == 0x88));
        return false;
      case 'J':
        push(node(Kind::kInt,
                  static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(le(4))))));
        return false;
      case 'K':
        push(node(Kind::kInt, le(1)));
        return false;
      case 'M':
        push(node(Kind::kInt, le(2)));
        return false;
      case 0x8a:
        integer_bytes(le(1));
        return false;
      case 0x8b:
        integer_bytes(le(4));
        return false;
      case 'I':
      case 'L':
        text_int(line());
        return false;
      case 'G': {  // BINFLOAT: big-endian
        uint64_t v = 0;
        const unsigned char *q = reinterpret_cast<const unsigned char *>(take(8));
        for (int i = 0; i < 8; ++i) v = (v << 8) | q[i];
        push(node(Kind::kFloat, v));
        return false;
      }
      case 0x8c:
      case 'U':
        string(le(1));
        return false;
      case 'X':
      case 'T':
        string(le(4));
        return false;
      case 0x8d:
        string(le(8));
        return false;
      case 'C':
        string(le(1), Kind::kBytes);
        return false;
      case 'B':
        string(le(4), Kind::kBytes);
        return false;
      case 0x8e:
        string(le(8), Kind::kBytes);
        return false;
      case ']':
        push(container(Kind::kList));
        return false;
      case 0x8f:  // EMPTY_SET: a list here
        push(container(Kind::kList));
        return false;
      case '}':
        push(container(Kind::kDict));
        return false;
      case ')':
        push(container(Kind::kTuple));
        return false;
      case 'l':
        collect(Kind::kList);
        return false;
      case 0x91:  // FROZENSET
        collect(Kind::kList);
        return false;
      case 't':
        collect(Kind::kTuple);
        return false;
      case 'd':
        collect(Kind::kDict);
        return false;
      case 0x85:
      case 0x86:
      case 0x87:
        tuple_of(code - 0x84u);
        return false;
      case 'a': {
        uint32_t v = pop();
        items_of(top(), Kind::kList, "APPEND").push_back(v);
        return false;
      }
      case 'e':
      case 0x90: {  // APPENDS, ADDITEMS: the list lies just under the mark
        size_t m = pop_mark();
        if (m == 0 || m - 1 < floor()) fail("APPENDS with no list under its MARK");
        std::vector<uint32_t> &items = items_of(stack_[m - 1], Kind::kList, "APPENDS");
        items.insert(items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
        stack_.resize(m);
        return false;
      }
      case 's': {
        uint32_t v = pop();
        uint32_t k = pop();
        std::vector<uint32_t> &items = items_of(top(), Kind::kDict, "SETITEM");
        items.push_back(k);
        items.push_back(v);
        return false;
      }
      case 'u': {
        size_t m = pop_mark();
        if (m == 0 || m - 1 < floor()) fail("SETITEMS with no dict under its MARK");
        if ((stack_.size() - m) % 2) fail("SETITEMS with an odd count");
        std::vector<uint32_t> &items = items_of(stack_[m - 1], Kind::kDict, "SETITEMS");
        items.insert(items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
        stack_.resize(m);
        return false;
      }
      case 'q':
        put(le(1));
        return false;
      case 'r':
        put(le(4));
        return false;
      case 'p':
        put(text_key());
        return false;
      case 0x94:  // MEMOIZE
        put(memo_.size());
        return false;
      case 'h':
        get(le(1));
        return false;
      case 'j':
        get(le(4));
        return false;
      case 'g':
        get(text_key());
        return false;
      case 'c':
      case 0x93:
      case 'R':
      case 'b':
      case 'i':
      case 'o':
      case 0x81:
      case 0x92:
        p_ = at;
        fail("the pickle builds a Python object (opcode 0x" + hex(code) +
             "); a memory snapshot holds only dicts, lists, strings and numbers");
      default:
        p_ = at;
        fail("opcode 0x" + hex(code) + " is outside the subset this reader knows");
    }
  }
  static std::string hex(uint8_t c) {
    const char *digits = "0123456789abcdef";
    return {digits[c >> 4], digits[c & 15]};
  }

  Document &d_;
  size_t p_, end_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  absl::flat_hash_map<uint32_t, uint32_t> memo_;
};

Document::~Document() {
  if (mapping_) munmap(mapping_, size_);
}

std::unique_ptr<Document> Document::parse(std::string bytes) {
  std::unique_ptr<Document> d(new Document());
  d->owned_ = std::move(bytes);
  d->data_ = d->owned_.data();
  d->size_ = d->owned_.size();
  Parser(*d).run();
  return d;
}

std::unique_ptr<Document> Document::parse_file(const std::string &path) {
  std::unique_ptr<Document> d(new Document());
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error("cannot open '" + path + "': " + strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    throw std::runtime_error("'" + path + "' is not a regular file");
  }
  d->size_ = static_cast<size_t>(st.st_size);
  if (d->size_ > 0) {
    void *m = mmap(nullptr, d->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      close(fd);
      throw std::runtime_error("cannot read '" + path + "': " + strerror(err));
    }
    d->mapping_ = m;
    d->data_ = static_cast<const char *>(m);
  }
  close(fd);
  Parser(*d).run();
  return d;
}

// ---- writing -------------------------------------------------------------------------------

Writer::Writer() {
  op(0x80);  // PROTO 4
  op(4);
}

void Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void Writer::none() { op('N'); }
void Writer::boolean(bool v) { op(v ? 0x88 : 0x89); }

void Writer::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    op('K');
    op(static_cast<uint8_t>(v));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op('J');
    u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {  // LONG1 with the fewest bytes that keep the sign
    uint8_t bytes[8];
    for (int i = 0; i < 8; ++i)
      bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
    int n = 8;
    while (n > 1 && ((bytes[n - 1] == 0 && !(bytes[n - 2] & 0x80)) ||
                     (bytes[n - 1] == 0xFF && (bytes[n - 2] & 0x80))))
      --n;
    op(0x8a);
    op(static_cast<uint8_t>(n));
    out_.append(reinterpret_cast<const char *>(bytes), static_cast<size_t>(n));
  }
}

void Writer::real(double v) {
  op('G');
  uint64_t bits = std::bit_cast<uint64_t>(v);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void Writer::string(std::string_view s) {
  if (s.size() < 256) {
    op(0x8c);
    op(static_cast<uint8_t>(s.size()));
  } else {
    op('X');
    u32(static_cast<uint32_t>(s.size()));
  }
  out_.append(s);
}

void Writer::shared_string(const std::string &s) {
  auto it = strings_.find(s);
  if (it != strings_.end()) {
    get(it->second);
    return;
  }
  string(s);
  strings_.emplace(s, memoize());
}

void Writer::begin_list() {
  op(']');
  op('(');
}
void Writer::end_list() { op('e'); }
void Writer::begin_dict() {
  op('}');
  op('(');
}
void Writer::end_dict() { op('u'); }
void Writer::tuple2() { op(0x86); }

uint32_t Writer::memoize() {
  op(0x94);
  return memo_++;
}

void Writer::get(uint32_t slot) {
  if (slot < 256) {
    op('h');
    op(static_cast<uint8_t>(slot));
  } else {
    op('j');
    u32(slot);
  }
}

std::string Writer::finish() {
  op('.');
  return std::move(out_);
}

}  // namespace adprof::pickle
