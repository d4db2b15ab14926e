// The small base every item model of the GUI shares: fixed column headers, a flat-table
// default for index()/parent() (the tree model overrides them), and two roles every view uses:
// SortRole gives the raw value (bytes as a number, not "4.0 MiB") so sorting is numeric, and
// LinkRole gives the address a cell links to (a duplicate's source).
#pragma once

#include <QAbstractItemModel>
#include <QStringList>

namespace adprof::gui {

class ModelBase : public QAbstractItemModel {
  Q_OBJECT

 public:
  enum Roles { SortRole = Qt::UserRole + 1, LinkRole, RowKeyRole };

  explicit ModelBase(QStringList headers, QObject *parent = nullptr)
      : QAbstractItemModel(parent), headers_(std::move(headers)) {}

  int columnCount(const QModelIndex &parent = {}) const override {
    Q_UNUSED(parent);
    return static_cast<int>(headers_.size());
  }
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override {
    if (orientation == Qt::Horizontal && role == Qt::DisplayRole && section >= 0 &&
        section < headers_.size())
      return headers_[section];
    return {};
  }
  // Flat tables: rows() rows under the invisible root, nothing below them.
  QModelIndex index(int row, int column, const QModelIndex &parent = {}) const override {
    if (parent.isValid() || row < 0 || column < 0 || row >= rows() || column >= columnCount())
      return {};
    return createIndex(row, column);
  }
  QModelIndex parent(const QModelIndex &) const override { return {}; }
  int rowCount(const QModelIndex &parent = {}) const override {
    return parent.isValid() ? 0 : rows();
  }
  QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
    return cell(index.row(), index.column(), role);
  }

 protected:
  virtual int rows() const { return 0; }
  virtual QVariant cell(int /*row*/, int /*column*/, int /*role*/) const { return {}; }
  // Replaces the contents: call with the change between begin and end.
  template <class F>
  void reset(F &&change) {
    beginResetModel();
    change();
    endResetModel();
  }

 private:
  QStringList headers_;
};

}  // namespace adprof::gui
