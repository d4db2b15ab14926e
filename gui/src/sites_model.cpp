#include "sites_model.h"

#include <algorithm>
#include <map>

#include "adprof/report.h"

namespace adprof::gui {

SitesModel::SitesModel(QObject *parent)
    : ModelBase(
          {tr("Frame"), tr("Allocations"), tr("Bytes"), tr("Live at peak"), tr("Live at exit")},
          parent) {}

void SitesModel::setSites(std::vector<SiteSummary> sites) {
  reset([&] {
    sites_ = std::move(sites);
    build();
  });
}

void SitesModel::setDirection(Direction direction) {
  if (direction == direction_) return;
  reset([&] {
    direction_ = direction;
    build();
  });
}

// Each site's path of frames (its stack, or the site alone), merged with the paths before it
// that share a prefix; every node on the path adds the site's figures.
void SitesModel::build() {
  nodes_.clear();
  roots_.clear();
  std::map<std::pair<int, QString>, int> child_of;  // (parent, frame) -> node
  for (size_t s = 0; s < sites_.size(); ++s) {
    const SiteSummary &site = sites_[s];
    std::vector<QString> path;
    if (site.stack.empty()) {
      path.push_back(QString::fromStdString(site.site));
    } else {
      for (const std::string &f : site.stack) path.push_back(QString::fromStdString(f));
      if (direction_ == Direction::TopDown) std::reverse(path.begin(), path.end());
    }
    int parent = -1;
    for (const QString &frame : path) {
      auto [it, inserted] = child_of.try_emplace({parent, frame}, static_cast<int>(nodes_.size()));
      if (inserted) {
        Node n;
        n.frame = frame;
        n.parent = parent;
        std::vector<int> &siblings = parent < 0 ? roots_ : nodes_[parent].children;
        n.row = static_cast<int>(siblings.size());
        siblings.push_back(it->second);
        nodes_.push_back(std::move(n));
      }
      Node &n = nodes_[it->second];
      n.allocations += site.allocations;
      n.bytes += site.bytes;
      n.peak_bytes += site.peak_bytes;
      n.exit_bytes += site.exit_bytes;
      parent = it->second;
    }
    // The node that stands for the site: its own frame (bottom-up: the first; top-down: the
    // last of its path).
    int site_node = parent;
    if (direction_ == Direction::BottomUp && !path.empty())
      while (nodes_[site_node].parent >= 0) site_node = nodes_[site_node].parent;
    nodes_[site_node].site = static_cast<int>(s);
  }
}

const SitesModel::Node *SitesModel::node(const QModelIndex &index) const {
  if (!index.isValid()) return nullptr;
  const auto i = static_cast<size_t>(index.internalId());
  return i < nodes_.size() ? &nodes_[i] : nullptr;
}

QString SitesModel::siteOf(const QModelIndex &index) const {
  const Node *n = node(index);
  return n && n->site >= 0 ? QString::fromStdString(sites_[n->site].site) : QString();
}

QModelIndex SitesModel::index(int row, int column, const QModelIndex &parent) const {
  if (row < 0 || column < 0 || column >= ColumnCount) return {};
  const std::vector<int> *rows = &roots_;
  if (parent.isValid()) {
    const Node *p = node(parent);
    if (!p) return {};
    rows = &p->children;
  }
  if (row >= static_cast<int>(rows->size())) return {};
  return createIndex(row, column, static_cast<quintptr>((*rows)[row]));
}

QModelIndex SitesModel::parent(const QModelIndex &child) const {
  const Node *n = node(child);
  if (!n || n->parent < 0) return {};
  return createIndex(nodes_[n->parent].row, 0, static_cast<quintptr>(n->parent));
}

int SitesModel::rowCount(const QModelIndex &parent) const {
  if (!parent.isValid()) return static_cast<int>(roots_.size());
  if (parent.column() != 0) return 0;
  const Node *n = node(parent);
  return n ? static_cast<int>(n->children.size()) : 0;
}

QVariant SitesModel::data(const QModelIndex &index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  const Node *n = node(index);
  if (!n) return {};
  const uint64_t values[] = {0, n->allocations, n->bytes, n->peak_bytes, n->exit_bytes};
  if (role == SortRole)
    return index.column() == Frame ? QVariant(n->frame)
                                   : QVariant(static_cast<qulonglong>(values[index.column()]));
  if (role == Qt::DisplayRole) {
    if (index.column() == Frame) return n->frame;
    if (index.column() == Allocations) return static_cast<qulonglong>(n->allocations);
    return QString::fromStdString(format_bytes(values[index.column()]));
  }
  if (role == Qt::ToolTipRole && index.column() == Frame) return n->frame;
  if (role == Qt::TextAlignmentRole && index.column() != Frame)
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

}  // namespace adprof::gui
