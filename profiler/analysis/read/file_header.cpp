// The trace file opened and its header read and checked (the layout: trace_format.h,
// "FileHeader"); the reader's one way to the file's bytes, read_at.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "trace_reader_impl.h"

namespace adprof {

namespace fmt = format;

void TraceReader::Impl::open(const std::string &path) {
  // O_NONBLOCK: a FIFO with no writer is refused below, not waited for (no effect on a file).
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw TraceError("cannot open '" + path + "': " + strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw TraceError("'" + path + "' is not a regular file");
  file_size = static_cast<uint64_t>(st.st_size);
}

// FileHeader (64 bytes): magic[8] version:u32 header_size:u32 pid:u64 start_ticks:u64
// start_wall_ns:u64 ticks_per_second:u64 page_size:u32 flags:u32 run_id:u32 crc32(0..59):u32.
TraceHeader TraceReader::Impl::read_header(const std::string &path) {
  TraceHeader header;
  uint8_t h[fmt::kFileHeaderSize];
  if (file_size < sizeof h || !read_at(0, h, sizeof h) ||
      memcmp(h, fmt::kFileMagic, sizeof fmt::kFileMagic) != 0)
    throw TraceError("'" + path + "' is not an adprof trace");
  header.version = fmt::get_u32(h + 8);
  if (header.version < fmt::kOldestVersion || header.version > fmt::kVersion)
    throw TraceError("'" + path + "' is an adprof trace of version " +
                     std::to_string(header.version) + "; this adprof reads versions " +
                     std::to_string(fmt::kOldestVersion) + " to " + std::to_string(fmt::kVersion));
  decoding.version = header.version;
  if (fmt::get_u32(h + 60) != static_cast<uint32_t>(crc32(0L, h, 60)))
    throw TraceError("'" + path + "': the trace header is damaged (checksum mismatch)");
  header.pid = fmt::get_u64(h + 16);
  header.start_ticks = fmt::get_u64(h + 24);
  header.start_wall_ns = fmt::get_u64(h + 32);
  header.ticks_per_second = fmt::get_u64(h + 40);
  header.page_size = fmt::get_u32(h + 48);
  header.flags = fmt::get_u32(h + 52);
  header.run_id = fmt::get_u32(h + 56);
  decoding.stacks = header.stacks();
  if (header.ticks_per_second == 0)
    throw TraceError("'" + path + "': the trace header has no clock rate");
  return header;
}

bool TraceReader::Impl::read_at(uint64_t offset, void *dst, size_t n) const {
  auto *p = static_cast<uint8_t *>(dst);
  while (n > 0) {
    ssize_t r = pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

}  // namespace adprof
