// How the recording ended, as the reader tells it (TraceEnd, docs/ARCHITECTURE.md "Damaged
// input"): the footer's end reason, a file cut short of its footer, and the verdict on the
// damage found (judge): what the reader cannot read whole is never passed off as whole.
#include <signal.h>

#include <cstring>

#include "trace_reader_impl.h"

namespace adprof {

namespace fmt = format;

namespace {

std::string signal_name(int sig) {
  const char *abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

void TraceReader::Impl::end_from_footer(const fmt::Footer &f, TraceEnd &end) {
  if (f.reason == static_cast<uint64_t>(fmt::EndReason::kExit)) {
    end.complete = true;
    end.cut = false;
    end.reason = "complete";
  } else if (f.reason == static_cast<uint64_t>(fmt::EndReason::kSignal)) {
    end.reason = "the program was ended by " + signal_name(static_cast<int>(f.signal)) +
                 "; events of other threads since their last chunk are missing";
  } else if (f.reason == static_cast<uint64_t>(fmt::EndReason::kExec)) {
    end.complete = true;
    end.cut = false;
    end.exec = true;
    end.reason = "the process replaced itself with exec; its new image has its own trace";
  } else {
    end.reason = "recording stopped early (trace write error)";
  }
}

void TraceReader::Impl::end_from_file(bool footer, const std::string &damage, uint64_t offset,
                                      TraceEnd &end) {
  if (!damage.empty()) {
    end.cut = true;
    end.complete = false;
    end.cut_at_offset = offset;
    end.reason = "cut: " + damage + " at byte " + std::to_string(offset) +
                 "; read up to the last complete chunk";
  } else if (!footer) {
    end.cut = true;
    end.cut_at_offset = offset;
    end.reason =
        "cut: the trace has no end record (the program was killed, or is still running); read "
        "up to the last complete chunk";
  }
}

void TraceReader::judge(bool at_end) {
  Impl &m = *impl_;
  if (at_end) m.judged_at_end = true;
  std::string damage;
  auto add = [&](const std::string &what) { damage += (damage.empty() ? "" : "; ") + what; };
  const ReadStats &s = stats_;
  if (s.missing_chunks)
    add(std::to_string(s.missing_chunks) + " chunk(s) missing" +
        (m.first_gap.empty() ? "" : " (the first: " + m.first_gap + ")"));
  if (s.corrupt_chunks)
    add(std::to_string(s.corrupt_chunks) +
        " chunk(s) damaged (failed their checksum or decoding; skipped from there)");
  const bool footer_ok = !end_.cut;  // a footer of a normal exit or an exec
  if (footer_ok && end_.footer_chunks < m.file_chunks)
    add("the file holds " + std::to_string(m.file_chunks) + " chunks, its end record counts " +
        std::to_string(end_.footer_chunks));
  if (footer_ok && m.judged_at_end && s.events + m.superseded_events != end_.footer_events)
    add("the end record counts " + std::to_string(end_.footer_events) + " events, " +
        std::to_string(s.events + m.superseded_events) + " were read");
  if (end_.footer_dropped)
    add("the recorder dropped " + std::to_string(end_.footer_dropped) + " events");
  end_.damaged = !damage.empty();
  if (!end_.damaged) {
    end_.reason = m.end_reason;
    return;
  }
  end_.complete = false;
  end_.reason = (end_.cut ? m.end_reason + "; also damaged: " : "damaged: ") + damage +
                "; read what was left";
}

}  // namespace adprof
