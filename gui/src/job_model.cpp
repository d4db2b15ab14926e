#include "job_model.h"

#include <QColor>
#include <QFont>

#include "adprof/job.h"
#include "adprof/role_style.h"
#include "palette.h"

namespace adprof::gui {

QString lane_name(const job::JobLanes &job, size_t lane) {
  const job::Process &p = job.job.processes[job.lanes[lane].process];
  if (p.kind == job::Kind::kRank) return QObject::tr("rank %1").arg(p.rank);
  return QObject::tr("%1 %2").arg(job::kind_name(p.kind)).arg(p.pid);
}

JobRanksModel::JobRanksModel(QObject *parent)
    : ModelBase({tr("Rank"), tr("Node"), tr("PID"), tr("Peak"), tr("Peak at"),
                 tr("Largest role at the peak"), tr("Device peak"), tr("Steps"), tr("Workers"),
                 tr("Trace")},
                parent) {}

void JobRanksModel::setJob(std::shared_ptr<const job::JobLanes> job) {
  reset([&] { job_ = std::move(job); });
}

const job::Process *JobRanksModel::process(int row) const {
  if (!job_ || row < 0 || row >= rows()) return nullptr;
  return &job_->job.processes[job_->lanes[static_cast<size_t>(row)].process];
}

QVariant JobRanksModel::cell(int row, int column, int role) const {
  const QVariant own = ownCell(row, column, role);
  if (role != Qt::ToolTipRole || row != job_->outlier_lane) return own;
  // The outlier's row: the job report's words under the cell's own tip (a device peak's time
  // and reserve, a summarized peak's step), which they used to replace.
  const QString words = QString::fromStdString(job::outlier_text(job_->job)).trimmed();
  return own.toString().isEmpty() ? words : own.toString() + "\n\n" + words;
}

QVariant JobRanksModel::ownCell(int row, int column, int role) const {
  const job::Lane &lane = job_->lanes[static_cast<size_t>(row)];
  const job::Process &p = job_->job.processes[lane.process];
  const Report &r = p.report;
  const bool outlier = row == job_->outlier_lane;
  if (role == Qt::FontRole && outlier) {
    QFont bold;
    bold.setBold(true);
    return bold;
  }
  auto bytes = [role](uint64_t b) -> QVariant {
    if (role == Qt::DisplayRole) return format_bytes_q(b);
    if (role == SortRole) return QVariant::fromValue<qulonglong>(b);
    if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  };
  auto number = [role](int64_t v) -> QVariant {
    if (role == Qt::DisplayRole) return v < 0 ? QString("-") : QString::number(v);
    if (role == SortRole) return QVariant::fromValue<qlonglong>(v);
    if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  };
  switch (column) {
    case Rank:
      if (role == Qt::DisplayRole) return lane_name(*job_, static_cast<size_t>(row));
      if (role == SortRole) return QVariant::fromValue<qlonglong>(p.rank);
      return {};
    case Node:
      return number(p.node);
    case Pid:
      return number(static_cast<int64_t>(p.pid));
    case Peak: {
      // The trace's peak (trace_peak: a step window's summaries too), as the job report's.
      const TracePeak peak = trace_peak(r);
      if (role == Qt::ToolTipRole && peak.summarized)
        return tr("In step %1, outside the step window (--steps): that step's summary, "
                  "without its buffers, labels or ops")
            .arg(peak.step);
      return bytes(peak.bytes);
    }
    case PeakAt: {
      const double at = lane.offset + trace_peak(r).time;  // on the job's clock
      if (role == Qt::DisplayRole) return format_seconds(at);
      if (role == SortRole) return at;
      if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    }
    case LargestRole: {
      const TracePeak peak = trace_peak(r);
      // A peak in a folded step: its roles are the writer's summary's, the only figures the
      // trace keeps of that step (docs/RECORDING.md, "Step windows").
      if (role == Qt::ToolTipRole && peak.summarized)
        return tr("Bytes by role at step %1's peak, from that step's summary (outside the step "
                  "window, --steps): no buffers, labels or ops to show")
            .arg(peak.step);
      const auto &by_role = peak.by_role;
      int largest = 0;
      for (int k = 1; k < kRoleCount; ++k)
        if (by_role[k] > by_role[largest]) largest = k;
      if (role == Qt::DisplayRole)
        return QString("%1 %2").arg(role_name(largest), format_bytes_q(by_role[largest]));
      if (role == SortRole) return QVariant::fromValue<qulonglong>(by_role[largest]);
      if (role == Qt::DecorationRole) return QColor::fromRgb(role_rgb(largest));
      return {};
    }
    case DevicePeak:  // the job report's (trace_device_peak); "-": no device memory
      if (role == Qt::DisplayRole && r.device_peak == 0) return QString("-");
      if (role == Qt::ToolTipRole && r.device_peak)
        return tr("Device peak at %1 s, reserved peak %2")
            .arg(lane.offset + r.device_peak_time, 0, 'f', 3)
            .arg(format_bytes_q(r.device_reserved_peak));
      return bytes(r.device_peak);
    case Steps:
      return number(static_cast<int64_t>(r.steps.size()));
    case Workers: {
      const auto workers =
          p.kind == job::Kind::kRank ? job_->job.workers_of(p.rank) : std::vector<size_t>{};
      uint64_t peak = 0;
      for (size_t w : workers) peak += trace_peak(job_->job.processes[w].report).bytes;
      if (role == Qt::DisplayRole)
        return workers.empty() ? QString("0")
                               : QString("%1 (%2)").arg(workers.size()).arg(format_bytes_q(peak));
      if (role == SortRole) return QVariant::fromValue<qulonglong>(peak);
      return {};
    }
    case Trace:
      if (role == Qt::DisplayRole || role == SortRole || role == Qt::ToolTipRole)
        return QString::fromStdString(p.trace);
      return {};
    default:
      return {};
  }
}

}  // namespace adprof::gui
