// Allocation sites (traces recorded with `adprof run --stacks`, adprof/sites.h) as a tree of
// frames: bottom-up (each allocation site, then its callers) or top-down (the outermost frame,
// then its callees down to the sites). A node's figures are those of the sites below it.
#pragma once

#include <QString>
#include <vector>

#include "adprof/sites.h"
#include "model_base.h"

namespace adprof::gui {

class SitesModel : public ModelBase {
  Q_OBJECT

 public:
  enum Column { Frame, Allocations, Bytes, AtPeak, AtExit, ColumnCount };
  enum class Direction { BottomUp, TopDown };
  explicit SitesModel(QObject *parent = nullptr);

  void setSites(std::vector<SiteSummary> sites);
  void setDirection(Direction direction);
  Direction direction() const { return direction_; }
  const std::vector<SiteSummary> &sites() const { return sites_; }
  // The site a row stands for: an allocation site's row in bottom-up (its top level), a leaf
  // in top-down; empty for a caller's row.
  QString siteOf(const QModelIndex &index) const;

  QModelIndex index(int row, int column, const QModelIndex &parent = {}) const override;
  QModelIndex parent(const QModelIndex &child) const override;
  int rowCount(const QModelIndex &parent = {}) const override;
  QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;

 private:
  struct Node {
    QString frame;
    int parent = -1;  // index into nodes_; -1: a top-level row
    int row = 0;      // within its parent
    std::vector<int> children;
    uint64_t allocations = 0, bytes = 0, peak_bytes = 0, exit_bytes = 0;
    int site = -1;  // the site it ends (index into sites_), -1: none
  };
  void build();
  const Node *node(const QModelIndex &index) const;

  std::vector<SiteSummary> sites_;
  Direction direction_ = Direction::BottomUp;
  std::vector<Node> nodes_;
  std::vector<int> roots_;
};

}  // namespace adprof::gui
