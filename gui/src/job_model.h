// The job view's table: one row per lane (a rank, or a process of a run without ranks), as
// `adprof report --job` lists the ranks: peak, when on the job's clock, steps, workers, trace.
#pragma once

#include <memory>

#include "adprof/job_lanes.h"
#include "model_base.h"

namespace adprof::gui {

class JobRanksModel : public ModelBase {
  Q_OBJECT

 public:
  enum Column {
    Rank,
    Node,
    Pid,
    Peak,
    PeakAt,
    LargestRole,
    DevicePeak,
    Steps,
    Workers,
    Trace,
    ColumnCount
  };
  explicit JobRanksModel(QObject *parent = nullptr);
  void setJob(std::shared_ptr<const job::JobLanes> job);
  const job::JobLanes *job() const { return job_.get(); }
  // The process of a row (its lane's), null for a row out of range.
  const job::Process *process(int row) const;

 protected:
  int rows() const override { return job_ ? static_cast<int>(job_->lanes.size()) : 0; }
  QVariant cell(int row, int column, int role) const override;

 private:
  QVariant ownCell(int row, int column, int role) const;  // cell() but the outlier's words
  std::shared_ptr<const job::JobLanes> job_;
};

// What a lane is called: "rank 1", or a process's kind and pid in a run without ranks.
QString lane_name(const job::JobLanes &job, size_t lane);

}  // namespace adprof::gui
