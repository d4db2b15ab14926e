// The chunk index: every chunk header after the file header read once, nothing decompressed
// (the layout: trace_format.h, "ChunkHeader"; the footer's body: "The footer chunk"). Each
// thread's chunks in sequence order, a snapshot replaced by the longer chunk of its sequence
// number, gaps counted as missing chunks, and the threads ranked by their index.
#include <algorithm>
#include <unordered_map>

#include "trace_reader_impl.h"

namespace adprof {

namespace fmt = format;

void TraceReader::Impl::index_chunks(uint32_t version, TraceEnd &end, ReadStats &stats) {
  // A header that fails its checks ends the readable part.
  std::unordered_map<uint32_t, uint32_t> thread_index;
  uint64_t offset = fmt::kFileHeaderSize;
  bool footer = false;
  std::string damage;
  while (offset < file_size) {
    uint8_t c[fmt::kChunkHeaderSize];
    if (file_size - offset < sizeof c || !read_at(offset, c, sizeof c)) {
      damage = "a partial chunk header";
      break;
    }
    const fmt::ChunkHeader ref = fmt::read_chunk_header(c);
    if (!fmt::chunk_header_valid(c)) {
      damage = "a damaged chunk header";
      break;
    }
    if (file_size - offset - sizeof c < ref.stored) {
      damage = "a partial chunk";
      break;
    }
    if (ref.thread == fmt::kFooterThread) {
      std::vector<uint8_t> body(ref.stored);
      fmt::Footer f;
      bool whole = false;
      if (read_at(offset + sizeof c, body.data(), body.size()) &&
          fmt::chunk_checksum_ok(c, body.data(), body.size())) {
        whole = fmt::read_footer(body.data(), body.size(), f);
        end.footer_events = f.events;
        end.footer_chunks = f.chunks;
        end.footer_dropped = f.dropped;
        if (f.has_untraced_fork_children) end.untraced_fork_children = f.untraced_fork_children;
      }
      if (whole) {
        footer = true;
        end_from_footer(f, end);
      }
    } else {
      auto [it, inserted] =
          thread_index.try_emplace(ref.thread, static_cast<uint32_t>(threads.size()));
      if (inserted) threads.emplace_back(decoding, ref.thread);
      threads[it->second].chunks.push_back({offset, ref});
      ++chunks_total;
      ++file_chunks;
      file_events += ref.events;
    }
    offset += sizeof c + ref.stored;
  }
  end_from_file(footer, damage, offset, end);
  // A thread's chunks in sequence order. The writer may have written a snapshot of a buffer
  // (an idle thread's complete events) before the buffer itself: keep the longest per seq.
  const bool v1 = version < 2;
  auto is_snapshot = [v1](const ChunkRef &c) {
    return v1 ? c.header.events == 0 : (c.header.flags & fmt::kChunkFlagSnapshot) != 0;
  };
  for (auto &t : threads) {
    std::stable_sort(t.chunks.begin(), t.chunks.end(), [&](const ChunkRef &a, const ChunkRef &b) {
      if (a.header.seq != b.header.seq) return a.header.seq < b.header.seq;
      if (a.header.raw != b.header.raw) return a.header.raw > b.header.raw;
      return !is_snapshot(a) && is_snapshot(b);  // the full chunk before a snapshot of its length
    });
    // Two full chunks with one seq mean damage.
    auto last = std::unique(t.chunks.begin(), t.chunks.end(),
                            [&](const ChunkRef &kept, const ChunkRef &dropped) {
                              if (kept.header.seq != dropped.header.seq) return false;
                              if (!is_snapshot(kept) && !is_snapshot(dropped))
                                ++stats.corrupt_chunks;
                              superseded_events += dropped.header.events;
                              return true;
                            });
    chunks_total -= static_cast<uint64_t>(t.chunks.end() - last);
    t.chunks.erase(last, t.chunks.end());
    // Sequence numbers start at 0 and have no gaps: what is not there is missing.
    uint64_t expected = 0;
    for (const ChunkRef &c : t.chunks) {
      if (c.header.seq != expected && first_gap.empty())
        first_gap = "thread " + std::to_string(t.index) + "'s chunk " + std::to_string(expected);
      stats.missing_chunks += c.header.seq - expected;
      expected = uint64_t{c.header.seq} + 1;
    }
  }
  // Whole chunks the footer counts that the file lacks (a thread's last ones leave no gap).
  if (end.complete && end.footer_chunks > file_chunks &&
      end.footer_chunks - file_chunks > stats.missing_chunks)
    stats.missing_chunks = end.footer_chunks - file_chunks;
  // Events carry a thread's rank among the thread indices in the file, not the index itself:
  // the same number in a whole trace (indices are handed out from 0), and never more than the
  // number of threads, whatever index a damaged or crafted chunk names, so that whoever keeps
  // something per thread (the replay, the timeline) can keep it in a vector.
  std::vector<uint32_t> order;
  order.reserve(thread_index.size());
  for (const auto &entry : thread_index) order.push_back(entry.first);
  std::sort(order.begin(), order.end());
  for (uint32_t rank = 0; rank < order.size(); ++rank)
    threads[thread_index[order[rank]]].decoder.set_thread(rank);
}

}  // namespace adprof
