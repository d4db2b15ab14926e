// The item models: thin views over the analysis library's plain structs (gui_data.h).
#pragma once

#include <QString>
#include <memory>
#include <vector>

#include "gui_data.h"
#include "model_base.h"

namespace adprof::gui {

// "At an instant": live buffers as a tree role -> op kind -> buffer. The Label column is the
// name the program gave a buffer (an engine's module path, "model.fc1"): on an op row, the
// labels of its buffers.
class LiveBuffersModel : public ModelBase {
  Q_OBJECT

 public:
  enum Column { Name, Size, Dtype, Shape, Age, Op, Label, Phase, Source, Address, ColumnCount };
  explicit LiveBuffersModel(QObject *parent = nullptr);

  void setInstant(InstantData data);
  const InstantData &instant() const { return data_; }

  QModelIndex index(int row, int column, const QModelIndex &parent = {}) const override;
  QModelIndex parent(const QModelIndex &child) const override;
  int rowCount(const QModelIndex &parent = {}) const override;
  QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;

  // The buffer row of the live buffer at `addr` (column 0), invalid when not live.
  QModelIndex indexOfAddress(uint64_t addr) const;
  // The role row named `role` ("duplicate"), invalid when none is live.
  QModelIndex indexOfRole(const QString &role) const;
  // The live buffer of a buffer row, null for group rows.
  const LiveBuffer *buffer(const QModelIndex &index) const;
  uint64_t totalBytes() const;

 private:
  // A group's bytes and count are over every buffer live then; `buffers` lists the largest.
  struct OpGroup {
    QString name;
    int role_row = 0;
    int row = 0;  // within its role
    uint64_t bytes = 0;
    uint64_t count = 0;
    std::vector<int> buffers;  // indices into data_.buffers
    QString labels;            // its buffers' labels, most bytes first: "a, b (+3)"
    QString labels_tip;        // each label with its bytes, one a line
  };
  struct RoleGroup {
    QString name;
    uint64_t bytes = 0;
    uint64_t buffers = 0;
    std::vector<int> ops;  // indices into ops_
  };
  QVariant groupData(const QString &name, uint64_t bytes, uint64_t count, size_t listed, int column,
                     int role) const;
  QVariant opGroupData(const OpGroup &g, int column, int role) const;
  QVariant bufferData(const LiveBuffer &b, int column, int role) const;

  InstantData data_;
  std::vector<RoleGroup> roles_;
  std::vector<OpGroup> ops_;
};

class FindingsModel : public ModelBase {
  Q_OBJECT

 public:
  // Fix last: the column a reader needs most takes the width that is left (it was cut off).
  enum Column { Bytes, Kind, Message, Evidence, Fix, ColumnCount };
  explicit FindingsModel(QObject *parent = nullptr);
  void setFindings(std::vector<Finding> findings);
  const std::vector<Finding> &findings() const { return findings_; }

 protected:
  int rows() const override { return static_cast<int>(findings_.size()); }
  QVariant cell(int row, int column, int role) const override;

 private:
  std::vector<Finding> findings_;
};

// Ops by kind; Labels: the labels of its buffers live at the peak (module paths), most first.
class OpsModel : public ModelBase {
  Q_OBJECT

 public:
  enum Column {
    Name,
    Calls,
    Allocations,
    Bytes,
    LiveAtPeak,
    Labels,
    Temporaries,
    TemporaryBytes,
    ColumnCount
  };
  explicit OpsModel(QObject *parent = nullptr);
  void setOps(std::vector<OpSummary> ops);
  const std::vector<OpSummary> &ops() const { return ops_; }

 protected:
  int rows() const override { return static_cast<int>(ops_.size()); }
  QVariant cell(int row, int column, int role) const override;

 private:
  std::vector<OpSummary> ops_;
};

class WhatIfModel : public ModelBase {
  Q_OBJECT

 public:
  enum Column { Policy, Predicted, Measured, Saving, Note, ColumnCount };
  explicit WhatIfModel(QObject *parent = nullptr);
  using ModelBase::setData;  // this overload adds to QAbstractItemModel's, hiding none
  void setData(WhatIfData data);
  bool empty() const { return data_.rows.empty(); }

 protected:
  int rows() const override { return static_cast<int>(data_.rows.size()); }
  QVariant cell(int row, int column, int role) const override;

 private:
  WhatIfData data_;
};

class DiffModel : public ModelBase {
  Q_OBJECT

 public:
  enum Column { Kind, Name, Base, Current, Delta, DeltaPercent, ColumnCount };
  explicit DiffModel(QObject *parent = nullptr);
  void setRows(std::vector<DiffRow> rows);
  const std::vector<DiffRow> &diffRows() const { return rows_; }

 protected:
  int rows() const override { return static_cast<int>(rows_.size()); }
  QVariant cell(int row, int column, int role) const override;

 private:
  std::vector<DiffRow> rows_;
};

}  // namespace adprof::gui
