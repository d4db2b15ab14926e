// Where a trace's bytes go: every chunk's parts (tags, column directory, each column of
// chunk_columns.h) raw and as stored, and, to weigh other codings, the same parts recompressed
// at other zstd settings and a few alternative models of the heap events' fields.
// usage: profiler_bench_columns TRACE [LEVEL]
// Opens the chunks with the format's chunk decoder (chunk_decoder.h), not the TraceReader: it
// needs the chunks' parts, not their events; then walks the coded fields of the heap events.
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chunk_columns.h"
#include "chunk_decoder.h"
#include "heap_coder.h"
#include "trace_format.h"

namespace fmt = adprof::format;

namespace {

using Bytes = std::vector<uint8_t>;

size_t zsize(const Bytes &b, int level, bool ldm = false) {
  if (b.empty()) return 0;
  ZSTD_CCtx *c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
  if (ldm) {
    ZSTD_CCtx_setParameter(c, ZSTD_c_enableLongDistanceMatching, 1);
    ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 27);
  }
  Bytes out(ZSTD_compressBound(b.size()));
  size_t n = ZSTD_compress2(c, out.data(), out.size(), b.data(), b.size());
  ZSTD_freeCCtx(c);
  if (ZSTD_isError(n)) {
    fprintf(stderr, "zstd: %s\n", ZSTD_getErrorName(n));
    exit(1);
  }
  return n;
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double entropy_bits(const std::map<uint64_t, uint64_t> &h) {
  double total = 0, bits = 0;
  for (auto &[v, n] : h) total += static_cast<double>(n);
  for (auto &[v, n] : h) bits -= static_cast<double>(n) * std::log2(static_cast<double>(n) / total);
  return bits;
}

// One heap event of a columnar chunk, fields as coded.
struct HeapEv {
  uint8_t tag;
  uint64_t dt;
  bool free, alt;  // alt: allocation predicted / free by address
  uint32_t slot;
  uint64_t size, stack;
};

struct Totals {
  std::map<std::string, uint64_t> raw, stored;
  void add(const std::string &k, size_t r, size_t s) {
    raw[k] += r;
    stored[k] += s;
  }
};

const char *kColName[] = {"delta", "slot_low", "slot_high",  "size",        "heap_addr",
                          "other", "stack",    "heap_delta", "alloc_delta", "rank"};
static_assert(sizeof kColName / sizeof *kColName == fmt::kColumnCount);

// The delta field (0..3) of a kHeap event: in its tag, or (version 5 columnar) the next of
// kColHeapDelta, or with stacks, an allocation's, the next of kColAllocDelta.
struct DeltaFields {
  bool v5, stacks;
  const std::vector<uint8_t> *col[2];
  size_t at[2] = {};
  uint8_t next(uint8_t tag) {
    if (!v5) return (tag >> (4 + fmt::kHeapDeltaShift)) & 3;
    const int k = stacks && !(tag & 0x10);
    const size_t i = at[k]++;
    return i / 4 < col[k]->size() ? ((*col[k])[i / 4] >> (2 * (i % 4))) & 3 : 0;
  }
};

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: profiler_bench_columns TRACE [LEVEL]\n");
    return 2;
  }
  const int level = argc > 2 ? atoi(argv[2]) : 1;
  std::ifstream in(argv[1], std::ios::binary);
  Bytes file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < fmt::kFileHeaderSize || memcmp(file.data(), fmt::kFileMagic, 8) != 0) {
    fprintf(stderr, "profiler_bench_columns: not an adprof trace\n");
    return 2;
  }
  const uint32_t version = fmt::get_u32(file.data() + 8);
  const bool stacks = fmt::get_u32(file.data() + 52) & fmt::kFileFlagStacks;
  const int ncol = fmt::columns_in(version);
  const bool v5 = version >= 5, v6 = version >= 6;
  Totals tot;
  double compress_seconds = 0;  // compressing the tags and columns, as the writer thread does
  uint64_t events = 0, heap_events = 0, chunks = 0, plain_chunks = 0;
  // Whole-trace streams (every chunk's part appended), per thread, to weigh cross-chunk matching.
  std::map<std::string, Bytes> whole;
  std::map<uint64_t, uint64_t> dt_hist[4];  // per-event time deltas at >>0, >>4, >>8, >>12
  std::map<uint64_t, uint64_t> slot_rel_hist;
  std::map<int64_t, uint64_t> resid_units;  // unpredicted allocation: residual / usable
  std::map<uint64_t, std::map<uint64_t, uint64_t>> dt_given_kind;
  std::map<uint64_t, uint64_t> kind_pair;
  uint64_t unhandled = 0;
  std::map<std::string, size_t> alt;  // alternative codings: compressed bytes
  std::map<std::string, size_t> alt_raw;
  std::map<std::string, size_t> as_stored;
  uint64_t heap_dt_hist[2][7] = {};
  uint64_t def_count = 0, def_frames = 0;  // allocations', frees' deltas: 0..3, <256, 256, more  //
                                           // columnar chunks' parts as the file holds them
  auto add_alt = [&](const std::string &k, const Bytes &b) {
    alt[k] += zsize(b, level);
    alt_raw[k] += b.size();
  };
  size_t off = fmt::kFileHeaderSize;
  fmt::PayloadInflater inflater;
  while (off + fmt::kChunkHeaderSize <= file.size()) {
    const uint8_t *h = file.data() + off;
    const fmt::ChunkHeader header = fmt::read_chunk_header(h);
    const uint32_t tid = header.thread, flags = header.flags, stored = header.stored,
                   raw = header.raw, nev = header.events;
    const uint8_t *payload = h + fmt::kChunkHeaderSize;
    off += fmt::kChunkHeaderSize + stored;
    if (off > file.size()) break;
    tot.add("headers", fmt::kChunkHeaderSize, fmt::kChunkHeaderSize);
    if (tid == fmt::kFooterThread) {
      tot.add("footer", stored, stored);
      continue;
    }
    ++chunks;
    events += nev;
    // The chunk as the reader opens it (chunk_decoder.h): checked, inflated, split in parts.
    Bytes data;
    fmt::ChunkParts parts;
    if (!fmt::chunk_header_valid(h) || !fmt::chunk_checksum_ok(h, payload, stored) ||
        !inflater.inflate(header, payload, data) ||
        !fmt::split_chunk(data.data(), data.size(), header, version, parts)) {
      fprintf(stderr, "bad chunk\n");
      return 1;
    }
    if (!(flags & fmt::kChunkFlagColumns)) {
      ++plain_chunks;
      tot.add("plain chunks", raw, stored);
      continue;
    }
    // Tags, directory, columns; each was one zstd frame of the stored payload.
    std::vector<Bytes> part;
    part.emplace_back(parts.tags.p, parts.tags.end);
    uint64_t len[fmt::kColumnCount] = {};
    for (int k = 0; k < ncol; ++k)
      len[k] = static_cast<uint64_t>(parts.columns[k].end - parts.columns[k].p);
    const uint8_t *p = parts.columns_at;
    tot.add("directory", static_cast<size_t>(p - parts.bodies.p),
            zsize(Bytes(parts.bodies.p, p), level));
    std::vector<Bytes> col(fmt::kColumnCount);
    for (int k = 0; k < ncol; ++k) col[k].assign(parts.columns[k].p, parts.columns[k].end);
    // As stored: one zstd frame per non-empty part (tags, directory, columns), in that order.
    {
      std::vector<std::string> names = {"tags", "directory"};
      for (int k = 0; k < ncol; ++k)
        if (len[k]) names.push_back(kColName[k]);
      size_t at = 0;
      for (const std::string &name : names) {
        const size_t m = ZSTD_findFrameCompressedSize(payload + at, stored - at);
        if (ZSTD_isError(m)) break;
        as_stored[name] += m;
        at += m;
      }
    }
    const double t0 = cpu_seconds();
    tot.add("tags", nev, zsize(part[0], level));
    for (int k = 0; k < ncol; ++k) tot.add(kColName[k], col[k].size(), zsize(col[k], level));
    compress_seconds += cpu_seconds() - t0;
    const std::string th = "t" + std::to_string(tid) + ":";
    whole[th + "tags"].insert(whole[th + "tags"].end(), part[0].begin(), part[0].end());
    for (int k = 0; k < ncol; ++k)
      whole[th + kColName[k]].insert(whole[th + kColName[k]].end(), col[k].begin(), col[k].end());

    // Decode the events (heap events in detail, others skipped) to weigh other models.
    fmt::Cursor c[fmt::kColumnCount];
    for (int k = 0; k < ncol; ++k) c[k] = {col[k].data(), col[k].data() + col[k].size()};
    std::map<std::string, Bytes> split;  // I: parts of the address and "other" columns
    std::vector<std::vector<uint64_t>> defs;
    uint64_t last_def_id = 0, prev_alloc_stack = 0;
    std::vector<HeapEv> hev;
    std::vector<uint64_t> all_dt;  // every event's delta
    std::vector<uint8_t> kinds;    // 0 alloc, 1 free slot, 2 other
    size_t lo = 0;
    DeltaFields fields{v5, stacks, {&col[fmt::kColHeapDelta], &col[fmt::kColAllocDelta]}};
    for (uint32_t i = 0; i < nev; ++i) {
      const uint8_t tag = part[0][i], type = tag & 15, op = tag >> 4;
      if (type == static_cast<uint8_t>(fmt::EventType::kHeap)) {
        HeapEv e{};
        e.tag = tag;
        e.dt = fields.next(tag);
        if (e.dt == fmt::kHeapDeltaEscape) e.dt = c[fmt::kColDelta].varint();
        e.free = op & fmt::kHeapFree;
        e.alt = op & 0x8;
        if (e.free) {
          if (e.alt) {
            const uint8_t *a0 = c[fmt::kColHeapAddr].p;
            c[fmt::kColHeapAddr].varint();
            split["I heap_addr: addressed frees"].insert(
                split["I heap_addr: addressed frees"].end(), a0, c[fmt::kColHeapAddr].p);
            const uint8_t *o0 = c[fmt::kColOther].p;
            c[fmt::kColOther].varint();
            split["I other: addressed free classes"].insert(
                split["I other: addressed free classes"].end(), o0, c[fmt::kColOther].p);
          } else {
            if (v6) {  // a recency rank + 1 or an old block's slot (found by the decode, D)
              if (c[fmt::kColRank].varint() == 0) ++lo;
              e.slot = 0;
            } else {
              e.slot = col[fmt::kColSlotLow][lo] | col[fmt::kColSlotHigh][lo] << 8;
              ++lo;
            }
          }
        } else {
          if (!e.alt) {
            const uint8_t *a0 = c[fmt::kColHeapAddr].p;
            c[fmt::kColHeapAddr].varint();
            split["I heap_addr: allocations"].insert(split["I heap_addr: allocations"].end(), a0,
                                                     c[fmt::kColHeapAddr].p);
          }
          e.size = c[fmt::kColSize].varint();
          if (stacks) {
            e.stack = c[fmt::kColStack].varint();
            if (version >= 7)  // against the chunk's previous allocation's (trace_format.h)
              e.stack = prev_alloc_stack += static_cast<uint64_t>(fmt::unzigzag(e.stack));
          }
        }
        all_dt.push_back(e.dt);
        kinds.push_back(e.free ? (e.alt ? 2 : 1) : 0);
        hev.push_back(e);
        ++heap_events;
      } else {
        all_dt.push_back(c[fmt::kColDelta].varint());
        kinds.push_back(2);
        const uint8_t *o0 = c[fmt::kColOther].p;
        if (!fmt::skip_general_body(type, op, c[fmt::kColOther], stacks)) {
          fprintf(stderr, "bad body\n");
          return 1;
        }
        if (type == static_cast<uint8_t>(fmt::EventType::kAlloc) && stacks && version >= 7) {
          fmt::Cursor q{o0, c[fmt::kColOther].p};  // address, size, slack, [device], stack
          for (int f = 0; f < (op >= 2 ? 4 : 3); ++f) q.varint();
          prev_alloc_stack += static_cast<uint64_t>(fmt::unzigzag(q.varint()));
        }
        const bool def = type == static_cast<uint8_t>(fmt::EventType::kThreadName) &&
                         (op == fmt::kStackOperand || op == fmt::kSharedStackOperand);
        if (def) {  // J: other codings of the definitions (frames innermost first)
          fmt::Cursor q{o0, c[fmt::kColOther].p};
          uint64_t id = q.varint();
          const uint64_t n = q.varint();
          if (version >= 7) id = last_def_id + static_cast<uint64_t>(fmt::unzigzag(id));
          const uint64_t shared = op == fmt::kSharedStackOperand ? q.varint() : 0;
          std::vector<uint64_t> fr(n);
          uint64_t f = 0;
          for (uint64_t j = 0; j < n - shared; ++j)
            fr[j] = f = j == 0 ? q.varint() : f + static_cast<uint64_t>(fmt::unzigzag(q.varint()));
          for (uint64_t j = n - shared; j < n; ++j)
            fr[j] = defs.back()[defs.back().size() - (n - j)];
          auto put = [](Bytes &b, uint64_t v) {
            uint8_t tmp[10];
            b.insert(b.end(), tmp, fmt::put_varint(tmp, v));
          };
          auto common = [&](const std::vector<uint64_t> &a) {
            size_t k = 0;
            while (k < a.size() && k < fr.size() && a[a.size() - 1 - k] == fr[fr.size() - 1 - k])
              ++k;
            return k;
          };
          auto inner = [&](Bytes &b, size_t sh) {
            uint64_t prevf = 0;
            for (size_t j = 0; j + sh < fr.size(); ++j) {
              put(b, j == 0 ? fr[j] : fmt::zigzag(static_cast<int64_t>(fr[j] - prevf)));
              prevf = fr[j];
            }
          };
          for (const size_t K : {1, 16, 256, 100000}) {
            size_t best = 0, best_at = 0;
            for (size_t b = 0; b < defs.size() && b < K; ++b) {
              const size_t k = common(defs[defs.size() - 1 - b]);
              if (k > best) best = k, best_at = b;
            }
            Bytes &o = split["J defs: base among last " + std::to_string(K)];
            put(o, fmt::zigzag(static_cast<int64_t>(id - last_def_id)));
            put(o, n);
            put(o, best_at);
            put(o, best);
            inner(o, best);
            Bytes &o2 = split["J defs: base among last " + std::to_string(K) + ", fields apart"];
            put(o2, best_at);
            put(o2, best);
          }
          ++def_count;
          def_frames += n;
          defs.push_back(fr);
          last_def_id = id;
        }
        Bytes &to = split[def ? "I other: stack definitions" : "I other: the rest"];
        to.insert(to.end(), o0, c[fmt::kColOther].p);
      }
    }
    for (auto &[k, b] : split) add_alt(k, b);
    // Time deltas at coarser resolutions: each event's (t >> s) - (previous t >> s).
    {
      uint64_t t = fmt::get_u64(h + 24);
      uint64_t prev[4] = {t, t >> 4, t >> 8, t >> 12};
      for (uint64_t d : all_dt) {
        t += d;
        for (int s = 0; s < 4; ++s) {
          uint64_t q = t >> (4 * s);
          ++dt_hist[s][q - prev[s]];
          prev[s] = q;
        }
      }
    }
    // A: tags without the delta bits, the deltas apart (a byte each / 4 per byte / varints).
    {
      Bytes tags2, dbyte, dpack, desc, dfull, dfull_esc, dnib, dnib_esc;
      // H: the kHeap deltas by kind: allocations' and frees' apart (2-bit fields, escapes).
      Bytes h_alloc, h_free, h_alloc_esc, h_free_esc, h_alloc_nib, h_alloc_nib_esc;
      uint32_t n_alloc = 0, n_free = 0;
      uint8_t acc = 0;
      int nacc = 0;
      size_t hi = 0;
      for (uint32_t i = 0; i < nev; ++i) {
        uint8_t tag = part[0][i];
        uint64_t d = all_dt[i];
        if ((tag & 15) == static_cast<uint8_t>(fmt::EventType::kHeap)) {
          tag &= ~0x60;
          const bool is_free = tag & 0x10;
          Bytes &packed = is_free ? h_free : h_alloc;
          uint32_t &count = is_free ? n_free : n_alloc;
          if (count % 4 == 0) packed.push_back(0);
          packed.back() |= static_cast<uint8_t>((d < 3 ? d : 3) << (2 * (count % 4)));
          ++count;
          if (d >= 3) {
            uint8_t tmp[10];
            Bytes &esc = is_free ? h_free_esc : h_alloc_esc;
            esc.insert(esc.end(), tmp, fmt::put_varint(tmp, d));
          }
          if (!is_free) {
            if ((count - 1) % 2 == 0) h_alloc_nib.push_back(0);
            h_alloc_nib.back() |=
                static_cast<uint8_t>((d < 15 ? d : 15) << (4 * ((count - 1) % 2)));
            if (d >= 15) {
              uint8_t tmp[10];
              h_alloc_nib_esc.insert(h_alloc_nib_esc.end(), tmp, fmt::put_varint(tmp, d));
            }
          }
        }
        tags2.push_back(tag);
        uint8_t small = d < 3 ? static_cast<uint8_t>(d) : 3;
        dbyte.push_back(small);
        // The whole delta as a byte (255: escaped, a varint apart), or as a nibble (15).
        dfull.push_back(d < 255 ? static_cast<uint8_t>(d) : 255);
        if (d >= 255) {
          uint8_t tmp[10];
          dfull_esc.insert(dfull_esc.end(), tmp, fmt::put_varint(tmp, d));
        }
        if (i % 2 == 0) dnib.push_back(0);
        dnib.back() |= static_cast<uint8_t>((d < 15 ? d : 15) << (4 * (i % 2)));
        if (d >= 15) {
          uint8_t tmp[10];
          dnib_esc.insert(dnib_esc.end(), tmp, fmt::put_varint(tmp, d));
        }
        if (d >= 3) {
          uint8_t tmp[10];
          uint8_t *e = fmt::put_varint(tmp, d);
          desc.insert(desc.end(), tmp, e);
        }
        acc |= static_cast<uint8_t>(small << (2 * nacc));
        if (++nacc == 4) {
          dpack.push_back(acc);
          acc = 0;
          nacc = 0;
        }
        (void)hi;
      }
      if (nacc) dpack.push_back(acc);
      add_alt("A tags without delta", tags2);
      add_alt("A delta 2 bits, byte each", dbyte);
      add_alt("A delta 2 bits, 4 per byte", dpack);
      add_alt("A delta escapes", desc);
      add_alt("F delta as a byte", dfull);
      add_alt("H alloc deltas 2 bits", h_alloc);
      add_alt("H alloc deltas: escapes", h_alloc_esc);
      add_alt("H free deltas 2 bits", h_free);
      add_alt("H free deltas: escapes", h_free_esc);
      add_alt("H alloc deltas as nibbles", h_alloc_nib);
      add_alt("H alloc deltas as nibbles: escapes", h_alloc_nib_esc);
      add_alt("F delta as a byte: escapes", dfull_esc);
      add_alt("G delta as a nibble", dnib);
      add_alt("G delta as a nibble: escapes", dnib_esc);
    }
    for (const HeapEv &e : hev)
      ++heap_dt_hist[e.free][e.dt < 4 ? e.dt : e.dt < 256 ? 4 : e.dt == 256 ? 5 : 6];
    // C (version 6, stacks): an allocation's size against the last size of its stack in the
    // chunk, its stack against the last stack of its size, and both as a recency index.
    if (v6 && stacks) {
      Bytes sz_given_stack, st_given_size, st_zz_prev, st_mtf, site_mtf, site_rest;
      std::map<uint64_t, uint64_t> last_size_of_stack, last_stack_of_size;
      std::vector<uint64_t> recent_stacks;
      std::vector<std::pair<uint64_t, uint64_t>> recent_sites;
      uint64_t prev_stack = 0;
      auto put = [](Bytes &b, uint64_t v) {
        uint8_t tmp[10];
        b.insert(b.end(), tmp, fmt::put_varint(tmp, v));
      };
      for (const HeapEv &e : hev) {
        if (e.free) continue;
        auto [it, ins] = last_size_of_stack.try_emplace(e.stack, e.size);
        put(sz_given_stack, !ins && it->second == e.size ? 0 : e.size + 1);
        it->second = e.size;
        auto [jt, jns] = last_stack_of_size.try_emplace(e.size, e.stack);
        put(st_given_size, !jns && jt->second == e.stack ? 0 : e.stack + 1);
        jt->second = e.stack;
        put(st_zz_prev, fmt::zigzag(static_cast<int64_t>(e.stack - prev_stack)));
        prev_stack = e.stack;
        auto kt = std::find(recent_stacks.begin(), recent_stacks.end(), e.stack);
        if (kt == recent_stacks.end()) {
          put(st_mtf, 0);
          put(st_mtf, e.stack);
        } else {
          put(st_mtf, static_cast<uint64_t>(kt - recent_stacks.begin()) + 1);
          recent_stacks.erase(kt);
        }
        recent_stacks.insert(recent_stacks.begin(), e.stack);
        if (recent_stacks.size() > 256) recent_stacks.pop_back();
        const std::pair<uint64_t, uint64_t> site{e.stack, e.size};
        auto st = std::find(recent_sites.begin(), recent_sites.end(), site);
        if (st == recent_sites.end()) {
          put(site_mtf, 0);
          put(site_rest, e.stack);
          put(site_rest, e.size);
        } else {
          put(site_mtf, static_cast<uint64_t>(st - recent_sites.begin()) + 1);
          recent_sites.erase(st);
        }
        recent_sites.insert(recent_sites.begin(), site);
        if (recent_sites.size() > 256) recent_sites.pop_back();
      }
      add_alt("C6 size: 0 = stack's last, else size+1", sz_given_stack);
      add_alt("C6 stack: 0 = size's last, else id+1", st_given_size);
      add_alt("C6 stack: zz vs previous allocation's", st_zz_prev);
      add_alt("C6 stack: move-to-front index", st_mtf);
      add_alt("C6 site (stack,size): mtf index", site_mtf);
      add_alt("C6 site (stack,size): new ones", site_rest);
    }
    // B: the slot relative to the last allocation's slot (zz), and the slot as the freed
    // block's rank by recency among live blocks (traces before version 6, which write slots).
    if (!v6) {
      Bytes rel, rank_col, age_col, sz_same, sz_rest;
      std::vector<uint64_t> alloc_index_of_slot(fmt::HeapCoder::kSlots);
      uint64_t allocs = 0;
      std::vector<uint64_t> order;  // live slots in allocation order (newest last)
      std::map<uint64_t, uint64_t> last_size_of_stack;
      uint32_t last_slot = 0, next_slot = 0;
      std::vector<uint32_t> free_slots;
      for (const HeapEv &e : hev) {
        if (e.free && !e.alt) {
          int64_t d = static_cast<int64_t>(e.slot) - static_cast<int64_t>(last_slot);
          uint8_t tmp[10];
          uint8_t *x = fmt::put_varint(tmp, fmt::zigzag(d));
          rel.insert(rel.end(), tmp, x);
          ++slot_rel_hist[fmt::zigzag(d)];
          auto it = std::find(order.rbegin(), order.rend(), e.slot);
          uint64_t r = it == order.rend() ? 0xFFFF : static_cast<uint64_t>(it - order.rbegin());
          x = fmt::put_varint(tmp, r);
          rank_col.insert(rank_col.end(), tmp, x);
          x = fmt::put_varint(tmp, allocs - alloc_index_of_slot[e.slot]);
          age_col.insert(age_col.end(), tmp, x);
          if (it != order.rend()) order.erase(std::next(it).base());
          free_slots.push_back(e.slot);
        } else if (!e.free) {
          // The slot the coder hands out (heap_coder.h): the one freed last, else the next.
          uint32_t slot = ~0u;
          if (!free_slots.empty()) {
            slot = free_slots.back();
            free_slots.pop_back();
          } else if (next_slot < fmt::HeapCoder::kSlots) {
            slot = next_slot++;
          }
          last_slot = slot;
          if (slot != ~0u) order.push_back(slot);
          if (slot != ~0u) alloc_index_of_slot[slot] = allocs;
          ++allocs;
          if (stacks) {
            auto [it, ins] = last_size_of_stack.try_emplace(e.stack, e.size);
            bool same = !ins && it->second == e.size;
            sz_same.push_back(same);
            if (!same) {
              uint8_t tmp[10];
              uint8_t *x = fmt::put_varint(tmp, e.size);
              sz_rest.insert(sz_rest.end(), tmp, x);
            }
            it->second = e.size;
          }
        }
      }
      add_alt("B slot zz vs last alloc slot", rel);
      add_alt("B slot as recency rank", rank_col);
      add_alt("B slot as allocation age", age_col);
      if (stacks) {
        add_alt("C size same as stack's last (flag byte)", sz_same);
        add_alt("C size else", sz_rest);
      }
      // D: a faithful decode (the reader's, heap_coder.h) to weigh models of the addresses
      // the class stacks did not predict, and of the time delta given the event's kind.
      {
        auto coder = std::make_unique<fmt::HeapCoder>();
        coder->reset();
        fmt::Cursor d[fmt::kColumnCount];
        for (int k = 0; k < ncol; ++k) d[k] = {col[k].data(), col[k].data() + col[k].size()};
        uint64_t last_addr = 0;
        uint64_t class_last_free[fmt::kAddressedFreeClasses] = {};
        size_t li = 0;
        DeltaFields fields{v5, stacks, {&col[fmt::kColHeapDelta], &col[fmt::kColAllocDelta]}};
        uint64_t stride[fmt::ClassStacks::kSmallClasses + 1] = {};
        uint64_t prev_alloc[fmt::ClassStacks::kSmallClasses + 1] = {};
        Bytes cur_res, stride_res, tags3, fa_cur, fa_cls, fa_class_prev, fa_class_stride;
        uint64_t free_prev[fmt::ClassStacks::kSmallClasses + 1] = {};
        uint64_t free_stride[fmt::ClassStacks::kSmallClasses + 1] = {};
        uint8_t ctx = 0;
        // Version 6: the chunk's allocations in order, which are live, and the slot each took.
        std::vector<uint64_t> words(fmt::LiveOrder::words_for(nev));
        std::vector<uint16_t> counts(fmt::LiveOrder::counts_for(nev));
        std::vector<uint32_t> slot_at(nev);
        fmt::LiveOrder order;
        order.attach(words.data(), counts.data(), nev);
        order.restart(nev);
        auto on_alloc = [&](uint64_t addr, uint32_t cls) {
          const uint32_t slot = coder->on_alloc(addr, cls);
          if (v6 && order.push()) slot_at[order.size() - 1] = slot;
        };
        for (uint32_t i = 0; i < nev; ++i) {
          const uint8_t tag = part[0][i], type = tag & 15, op = tag >> 4;
          uint64_t dt;
          uint8_t kind;
          if (type != static_cast<uint8_t>(fmt::EventType::kHeap)) {
            dt = d[fmt::kColDelta].varint();
            kind = type;
            fmt::Cursor &o = d[fmt::kColOther];
            if (type == static_cast<uint8_t>(fmt::EventType::kAlloc) && op == 0) {
              last_addr += static_cast<uint64_t>(fmt::unzigzag(o.varint()));
              uint64_t size = o.varint(), slack = o.varint();
              if (stacks) o.varint();
              uint32_t cls = fmt::HeapCoder::class_of(size + slack);
              on_alloc(last_addr, cls);
              prev_alloc[cls] = last_addr;
            } else if (!fmt::skip_general_body(type, op, o, stacks)) {
              return 1;
            } else if (type == static_cast<uint8_t>(fmt::EventType::kFree) ||
                       type == static_cast<uint8_t>(fmt::EventType::kRetag) ||
                       type == static_cast<uint8_t>(fmt::EventType::kLabel) ||
                       type == static_cast<uint8_t>(fmt::EventType::kDescribe) ||
                       type == static_cast<uint8_t>(fmt::EventType::kContentHash)) {
              ++unhandled;  // their addresses move last_addr: counted, not followed
            }
          } else {
            dt = fields.next(tag);
            if (dt == 3) dt = d[fmt::kColDelta].varint();
            if (op & fmt::kHeapFree) {
              if (op & 0x8) {
                uint64_t zz = d[fmt::kColHeapAddr].varint();
                const uint32_t cls = static_cast<uint32_t>(d[fmt::kColOther].varint());
                if (cls >= fmt::kAddressedFreeClasses) return 1;
                const uint64_t addr = (v5 ? class_last_free[cls] : last_addr) +
                                      static_cast<uint64_t>(fmt::unzigzag(zz));
                class_last_free[cls] = addr;
                uint8_t tmp[10];
                uint8_t *x =
                    fmt::put_varint(tmp, fmt::zigzag(static_cast<int64_t>(addr - last_addr)));
                fa_cur.insert(fa_cur.end(), tmp, x);
                last_addr = addr;
                fa_cls.push_back(static_cast<uint8_t>(cls));
                const uint64_t usable = cls <= 16 ? cls * 8 : 0;  // exact below 128 only
                int64_t r1 = static_cast<int64_t>(last_addr - free_prev[cls]);
                int64_t r2 = static_cast<int64_t>(last_addr - (free_prev[cls] + free_stride[cls]));
                x = fmt::put_varint(tmp, fmt::zigzag(r1));
                fa_class_prev.insert(fa_class_prev.end(), tmp, x);
                x = fmt::put_varint(tmp, fmt::zigzag(r2));
                fa_class_stride.insert(fa_class_stride.end(), tmp, x);
                (void)usable;
                free_stride[cls] = last_addr - free_prev[cls];
                free_prev[cls] = last_addr;
                coder->on_free_address(last_addr, cls);
                kind = 17;
              } else {
                uint32_t slot;
                if (v6) {
                  const uint64_t v = d[fmt::kColRank].varint();
                  if (v == 0) {  // an old block, by its slot
                    slot = col[fmt::kColSlotLow][li] | col[fmt::kColSlotHigh][li] << 8;
                    ++li;
                  } else {
                    const uint32_t ordinal = order.with_rank(static_cast<uint32_t>(v - 1));
                    if (ordinal == fmt::LiveOrder::kNone) return 1;
                    order.remove(ordinal);
                    slot = slot_at[ordinal];
                  }
                } else {
                  slot = col[fmt::kColSlotLow][li] | col[fmt::kColSlotHigh][li] << 8;
                  ++li;
                }
                coder->on_free_slot(slot);
                kind = 16;
              }
            } else {
              int64_t zz = 0;
              if (!(op & 0x8)) zz = fmt::unzigzag(d[fmt::kColHeapAddr].varint());
              uint64_t size = d[fmt::kColSize].varint();
              if (stacks) d[fmt::kColStack].varint();
              uint64_t usable = fmt::default_usable_size(size);
              uint32_t cls = fmt::HeapCoder::class_of(usable);
              uint64_t addr = (op & 0x8)
                                  ? coder->predicted(cls)
                                  : coder->next_expected(cls, usable) + static_cast<uint64_t>(zz);
              kind = (op & 0x8) ? 18 : 19;
              if (!(op & 0x8)) {
                uint8_t tmp[10];
                uint8_t *x = fmt::put_varint(tmp, fmt::zigzag(zz));
                cur_res.insert(cur_res.end(), tmp, x);
                int64_t sr = static_cast<int64_t>(addr - (prev_alloc[cls] + stride[cls]));
                x = fmt::put_varint(tmp, fmt::zigzag(sr));
                stride_res.insert(stride_res.end(), tmp, x);
                if (usable && zz % static_cast<int64_t>(usable) == 0)
                  ++resid_units[zz / static_cast<int64_t>(usable)];
                else
                  ++resid_units[1 << 30];
              }
              stride[cls] = addr - prev_alloc[cls];
              prev_alloc[cls] = addr;
              on_alloc(addr, cls);
            }
          }
          // H(dt | kind, previous kind).
          ++dt_given_kind[static_cast<uint64_t>(ctx) << 8 | kind][dt];
          ++kind_pair[static_cast<uint64_t>(ctx) << 8 | kind];
          ctx = kind;
          tags3.push_back(kind);
        }
        add_alt("D addr residual (current)", cur_res);
        add_alt("E addressed free: zz vs last address", fa_cur);
        add_alt("E addressed free: class", fa_cls);
        add_alt("E addressed free: zz vs class's last", fa_class_prev);
        add_alt("E addressed free: zz vs class's last+stride", fa_class_stride);
        add_alt("D addr residual, class stride", stride_res);
      }
    }
  }

  printf("%s: version %u%s, %zu bytes, %llu events (%llu heap), %llu chunks (%llu plain)\n",
         argv[1], version, stacks ? " with stacks" : "", file.size(),
         static_cast<unsigned long long>(events), static_cast<unsigned long long>(heap_events),
         static_cast<unsigned long long>(chunks), static_cast<unsigned long long>(plain_chunks));
  printf("recompressed at zstd level %d:\n%-26s %12s %12s %8s\n", level, "part", "raw B", "zstd B",
         "B/event");
  uint64_t sum = 0;
  for (auto &[k, r] : tot.raw) {
    printf("%-26s %12llu %12llu %8.4f\n", k.c_str(), static_cast<unsigned long long>(r),
           static_cast<unsigned long long>(tot.stored[k]),
           static_cast<double>(tot.stored[k]) / static_cast<double>(events));
    sum += tot.stored[k];
  }
  printf("%-26s %12s %12llu %8.4f\n", "total", "", static_cast<unsigned long long>(sum),
         static_cast<double>(sum) / static_cast<double>(events));
  printf("as stored in the file (columnar chunks):\n");
  for (auto &[k, n] : as_stored)
    printf("%-26s %12s %12zu %8.4f\n", k.c_str(), "", n,
           static_cast<double>(n) / static_cast<double>(events));
  for (int f = 0; f < 2; ++f)
    printf("%s deltas: 0 %llu, 1 %llu, 2 %llu, 3 %llu, <256 %llu, 256 %llu, more %llu\n",
           f ? "free" : "alloc", (unsigned long long)heap_dt_hist[f][0],
           (unsigned long long)heap_dt_hist[f][1], (unsigned long long)heap_dt_hist[f][2],
           (unsigned long long)heap_dt_hist[f][3], (unsigned long long)heap_dt_hist[f][4],
           (unsigned long long)heap_dt_hist[f][5], (unsigned long long)heap_dt_hist[f][6]);
  printf("stack definitions: %llu, %llu frames\n", (unsigned long long)def_count,
         (unsigned long long)def_frames);
  printf("compressing the tags and columns took %.1f ns/event of CPU\n",
         compress_seconds * 1e9 / static_cast<double>(events));
  printf("\nwhole trace per thread and part (cross-chunk), zstd level %d / 19 / 19+long:\n", level);
  for (auto &[k, b] : whole)
    if (b.size() > 1000)
      printf("%-26s %12zu %10zu %10zu %10zu\n", k.c_str(), b.size(), zsize(b, level), zsize(b, 19),
             zsize(b, 19, true));
  printf("\nentropy of per-event time deltas (order 0), bits/event and B/event:\n");
  const char *res[] = {"TSC>>8 (~100 ns)", "TSC>>12 (~1.6 us)", "TSC>>16 (~26 us)",
                       "TSC>>20 (~0.4 ms)"};
  for (int s = 0; s < 4; ++s) {
    double b = entropy_bits(dt_hist[s]);
    printf("  %-20s %.3f bits  %.4f B/event  (%zu distinct)\n", res[s],
           b / static_cast<double>(events), b / 8 / static_cast<double>(events), dt_hist[s].size());
  }
  {
    double b = 0;
    for (auto &[k, h] : dt_given_kind) b += entropy_bits(h);
    printf("  TSC>>8, given the event's kind and the previous one's: %.3f bits %.4f B/event\n",
           b / static_cast<double>(events), b / 8 / static_cast<double>(events));
    printf("  kinds (order 1): %.4f B/event; events with unfollowed addresses: %llu\n",
           entropy_bits(kind_pair) / 8 / static_cast<double>(events),
           static_cast<unsigned long long>(unhandled));
  }
  printf("\nunpredicted allocations' residual in usable sizes (top 12):\n");
  {
    std::vector<std::pair<uint64_t, int64_t>> v;
    for (auto &[r, n] : resid_units) v.push_back({n, r});
    std::sort(v.rbegin(), v.rend());
    for (size_t i = 0; i < v.size() && i < 12; ++i)
      printf("  %lld: %llu\n", static_cast<long long>(v[i].second),
             static_cast<unsigned long long>(v[i].first));
  }
  printf("\nalternative codings (per chunk, zstd level %d):\n", level);
  for (auto &[k, n] : alt)
    printf("  %-40s raw %10zu zstd %10zu %8.4f B/event\n", k.c_str(), alt_raw[k], n,
           static_cast<double>(n) / static_cast<double>(events));
  return 0;
}
