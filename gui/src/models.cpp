#include "models.h"

#include <QBrush>
#include <QFont>
#include <algorithm>
#include <map>

#include "palette.h"

namespace adprof::gui {

namespace {

QString qs(const std::string &s) { return QString::fromStdString(s); }

QString hex(uint64_t addr) { return QStringLiteral("0x") + QString::number(addr, 16); }

// An op label's kind: the label is the kind, '#' and the call's number (Replay::op_label), and a
// kind may hold a '#' itself.
QString op_kind(const std::string &op) {
  auto hash = op.rfind('#');
  return qs(hash == std::string::npos ? op : op.substr(0, hash));
}

QString shape_text(const std::vector<int64_t> &shape) {
  if (shape.empty()) return {};
  QStringList dims;
  for (int64_t d : shape) dims << QString::number(d);
  return "[" + dims.join(", ") + "]";
}

QVariant bytes_cell(uint64_t bytes, int role) {
  if (role == Qt::DisplayRole) return format_bytes_q(bytes);
  if (role == ModelBase::SortRole) return QVariant::fromValue<qulonglong>(bytes);
  if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole) return QString::number(bytes) + " bytes";
  return {};
}

QVariant count_cell(uint64_t n, int role) {
  if (role == Qt::DisplayRole || role == ModelBase::SortRole)
    return QVariant::fromValue<qulonglong>(n);
  if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant text_cell(const QString &text, int role) {
  if (role == Qt::DisplayRole || role == ModelBase::SortRole || role == Qt::ToolTipRole)
    return text;
  return {};
}

// "a, b (+3)" from labels most bytes first ("" entries are unlabelled buffers, not named), and
// a tooltip with each label's bytes.
struct LabelSummary {
  QString text, tip;
};
LabelSummary summarize_labels(const std::vector<NamedBytes> &labels) {
  LabelSummary s;
  s.text = qs(labels_text(labels));
  QStringList tip;
  for (const NamedBytes &l : labels)
    tip << QStringLiteral("%1: %2").arg(l.name.empty() ? QObject::tr("(unlabelled)") : qs(l.name),
                                        format_bytes_q(l.bytes));
  s.tip = tip.join('\n');
  return s;
}

int role_index(const std::string &name) {
  int r = role_from_name(name);
  return r < 0 ? ADPROF_ROLE_FOREIGN : r;
}

}  // namespace

// ---- LiveBuffersModel ----

LiveBuffersModel::LiveBuffersModel(QObject *parent)
    : ModelBase({tr("Buffer"), tr("Size"), tr("Dtype"), tr("Shape"), tr("Age"), tr("Op"),
                 tr("Label"), tr("Phase"), tr("Duplicate of"), tr("Address")},
                parent) {}

void LiveBuffersModel::setInstant(InstantData data) {
  reset([&] {
    data_ = std::move(data);
    roles_.clear();
    ops_.clear();
    // The groups (role, op kind) with their bytes and counts over every buffer live then; the
    // listed buffers (the largest) hang under theirs. A buffer of no group (an instant made by
    // hand) makes one of its own, counted from the list.
    std::vector<RoleOpBytes> groups = data_.groups;
    std::map<std::pair<QString, QString>, size_t> group_of;
    for (size_t g = 0; g < groups.size(); ++g) group_of[{qs(groups[g].role), qs(groups[g].op)}] = g;
    std::vector<std::vector<int>> listed(groups.size());
    std::vector<bool> from_list(groups.size(), false);
    for (size_t i = 0; i < data_.buffers.size(); ++i) {
      const LiveBuffer &b = data_.buffers[i];
      auto [it, added] = group_of.try_emplace({qs(b.role), op_kind(b.op)}, groups.size());
      if (added) {
        groups.push_back({b.role, it->first.second.toStdString(), 0, 0, {}});
        listed.emplace_back();
        from_list.push_back(true);
      }
      if (from_list[it->second]) {
        RoleOpBytes &g = groups[it->second];
        g.bytes += b.size;
        ++g.buffers;
        auto label = std::find_if(g.labels.begin(), g.labels.end(),
                                  [&](const NamedBytes &l) { return l.name == b.label; });
        if (label == g.labels.end())
          g.labels.push_back({b.label, b.size});
        else
          label->bytes += b.size;
      }
      listed[it->second].push_back(static_cast<int>(i));
    }
    // Roles by bytes, then each role's op kinds by bytes (names break ties).
    std::map<QString, uint64_t> role_bytes;
    for (const RoleOpBytes &g : groups) role_bytes[qs(g.role)] += g.bytes;
    std::vector<std::pair<QString, uint64_t>> roles(role_bytes.begin(), role_bytes.end());
    std::stable_sort(roles.begin(), roles.end(),
                     [](const auto &a, const auto &b) { return a.second > b.second; });
    std::vector<size_t> order(groups.size());
    for (size_t g = 0; g < order.size(); ++g) order[g] = g;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return groups[a].bytes != groups[b].bytes ? groups[a].bytes > groups[b].bytes
                                                : groups[a].op < groups[b].op;
    });
    for (size_t r = 0; r < roles.size(); ++r) {
      RoleGroup role{roles[r].first, roles[r].second, 0, {}};
      for (size_t g : order) {
        if (qs(groups[g].role) != role.name) continue;
        role.ops.push_back(static_cast<int>(ops_.size()));
        role.buffers += groups[g].buffers;
        OpGroup &op = ops_.emplace_back();
        op.name = qs(groups[g].op);
        op.role_row = static_cast<int>(r);
        op.row = static_cast<int>(role.ops.size() - 1);
        op.bytes = groups[g].bytes;
        op.count = groups[g].buffers;
        op.buffers = std::move(listed[g]);  // in the list's order: largest first
        std::vector<NamedBytes> labels = groups[g].labels;
        std::stable_sort(
            labels.begin(), labels.end(),
            [](const NamedBytes &a, const NamedBytes &b) { return a.bytes > b.bytes; });
        LabelSummary summary = summarize_labels(labels);
        op.labels = std::move(summary.text);
        op.labels_tip = std::move(summary.tip);
      }
      roles_.push_back(std::move(role));
    }
  });
}

QModelIndex LiveBuffersModel::index(int row, int column, const QModelIndex &parent) const {
  if (row < 0 || column < 0 || column >= ColumnCount || row >= rowCount(parent)) return {};
  if (!parent.isValid()) return createIndex(row, column, quintptr(0));
  quintptr id = parent.internalId();
  if (id == 0) return createIndex(row, column, quintptr(parent.row() + 1));
  int g = roles_[id - 1].ops[parent.row()];
  return createIndex(row, column, quintptr(roles_.size() + 1 + g));
}

QModelIndex LiveBuffersModel::parent(const QModelIndex &child) const {
  if (!child.isValid()) return {};
  quintptr id = child.internalId();
  if (id == 0) return {};
  if (id <= roles_.size()) return createIndex(static_cast<int>(id - 1), 0, quintptr(0));
  const OpGroup &g = ops_[id - roles_.size() - 1];
  return createIndex(g.row, 0, quintptr(g.role_row + 1));
}

int LiveBuffersModel::rowCount(const QModelIndex &parent) const {
  if (!parent.isValid()) return static_cast<int>(roles_.size());
  if (parent.column() != 0) return 0;
  quintptr id = parent.internalId();
  if (id == 0) return static_cast<int>(roles_[parent.row()].ops.size());
  if (id <= roles_.size())
    return static_cast<int>(ops_[roles_[id - 1].ops[parent.row()]].buffers.size());
  return 0;
}

const LiveBuffer *LiveBuffersModel::buffer(const QModelIndex &index) const {
  if (!index.isValid() || index.model() != this) return nullptr;
  quintptr id = index.internalId();
  if (id <= roles_.size()) return nullptr;
  const OpGroup &g = ops_[id - roles_.size() - 1];
  return &data_.buffers[g.buffers[index.row()]];
}

QVariant LiveBuffersModel::groupData(const QString &name, uint64_t bytes, uint64_t count,
                                     size_t listed, int column, int role) const {
  if (column == Name) {
    if (role == Qt::DisplayRole)
      return listed < count ? tr("%1 (%2; %3 listed)").arg(name).arg(count).arg(listed)
                            : QStringLiteral("%1 (%2)").arg(name).arg(count);
    if (role == Qt::ToolTipRole && listed < count)
      return tr("%1 buffers, %2; the %3 largest are listed")
          .arg(count)
          .arg(format_bytes_q(bytes))
          .arg(listed);
    if (role == SortRole || role == RowKeyRole) return name;
    if (role == Qt::FontRole) {
      QFont f;
      f.setBold(true);
      return f;
    }
    return {};
  }
  if (column == Size) return bytes_cell(bytes, role);
  return {};
}

QVariant LiveBuffersModel::opGroupData(const OpGroup &g, int column, int role) const {
  if (column == Label) {
    if (role == Qt::ToolTipRole) return g.labels_tip;
    return text_cell(g.labels, role);
  }
  if (column == Name && role == Qt::ToolTipRole && !g.labels.isEmpty())
    return tr("%1 in %2").arg(g.name, g.labels);
  return groupData(g.name, g.bytes, g.count, g.buffers.size(), column, role);
}

QVariant LiveBuffersModel::bufferData(const LiveBuffer &b, int column, int role) const {
  switch (column) {
    case Name: {
      if (role == RowKeyRole) return QVariant::fromValue<qulonglong>(b.addr);
      QString name = b.label.empty() ? qs(b.op) : qs(b.label);
      if (role == Qt::ToolTipRole) {
        QString tip = QStringLiteral("%1\n%2 at %3, allocated by %4 in the %5 phase")
                          .arg(name, format_bytes_q(b.size), hex(b.addr), qs(b.op), qs(b.phase));
        if (!b.label.empty()) tip += tr("\nlabel (module): %1").arg(qs(b.label));
        return tip;
      }
      return text_cell(name, role);
    }
    case Size:
      return bytes_cell(b.size, role);
    case Dtype:
      return text_cell(qs(b.dtype), role);
    case Shape:
      return text_cell(shape_text(b.shape), role);
    case Age: {
      double age = std::max(0.0, data_.time - b.alloc_time);
      if (role == Qt::DisplayRole) return format_seconds(age);
      if (role == SortRole) return age;
      if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    }
    case Op:
      if (role == Qt::ToolTipRole && !b.label.empty())
        return tr("%1 in %2").arg(qs(b.op), qs(b.label));
      return text_cell(qs(b.op), role);
    case Label:
      return text_cell(qs(b.label), role);
    case Phase:
      return text_cell(qs(b.phase), role);
    case Source: {
      if (!b.source) return {};
      if (role == LinkRole) return QVariant::fromValue<qulonglong>(b.source);
      if (role == Qt::DisplayRole || role == SortRole)
        return b.source_label.empty() ? hex(b.source) + tr(" (not live)") : qs(b.source_label);
      if (role == Qt::ToolTipRole) return tr("Go to the source buffer at %1").arg(hex(b.source));
      if (role == Qt::ForegroundRole) return QBrush(QColor(0x00, 0x5A, 0xB5));
      if (role == Qt::FontRole) {
        QFont f;
        f.setUnderline(true);
        return f;
      }
      return {};
    }
    case Address:
      return text_cell(hex(b.addr), role);
    default:
      return {};
  }
}

QVariant LiveBuffersModel::data(const QModelIndex &index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid)) return {};
  quintptr id = index.internalId();
  if (id == 0) {
    const RoleGroup &g = roles_[index.row()];
    if (role == Qt::DecorationRole && index.column() == Name)
      return role_color(role_index(g.name.toStdString()));
    size_t listed = 0;
    for (int o : g.ops) listed += ops_[o].buffers.size();
    return groupData(g.name, g.bytes, g.buffers, listed, index.column(), role);
  }
  if (id <= roles_.size())
    return opGroupData(ops_[roles_[id - 1].ops[index.row()]], index.column(), role);
  return bufferData(*buffer(index), index.column(), role);
}

QModelIndex LiveBuffersModel::indexOfAddress(uint64_t addr) const {
  for (size_t g = 0; g < ops_.size(); ++g)
    for (size_t i = 0; i < ops_[g].buffers.size(); ++i)
      if (data_.buffers[ops_[g].buffers[i]].addr == addr)
        return createIndex(static_cast<int>(i), 0, quintptr(roles_.size() + 1 + g));
  return {};
}

QModelIndex LiveBuffersModel::indexOfRole(const QString &role) const {
  for (size_t r = 0; r < roles_.size(); ++r)
    if (roles_[r].name == role) return createIndex(static_cast<int>(r), 0, quintptr(0));
  return {};
}

uint64_t LiveBuffersModel::totalBytes() const {
  uint64_t sum = 0;
  for (const RoleGroup &g : roles_) sum += g.bytes;
  return sum;
}

// ---- FindingsModel ----

FindingsModel::FindingsModel(QObject *parent)
    : ModelBase({tr("At peak"), tr("Kind"), tr("Finding"), tr("Evidence"), tr("Fix")}, parent) {}

void FindingsModel::setFindings(std::vector<Finding> findings) {
  reset([&] { findings_ = std::move(findings); });
}

QVariant FindingsModel::cell(int row, int column, int role) const {
  const Finding &f = findings_[row];
  switch (column) {
    case Bytes:
      if (f.bytes == 0 && role == Qt::DisplayRole) return QString();
      return bytes_cell(f.bytes, role);
    case Message:
      return text_cell(qs(f.message), role);
    case Evidence:
      return text_cell(qs(f.evidence), role);
    case Fix:
      return text_cell(qs(f.fix), role);
    case Kind:  // a plain title; the stable kind ("policy.fused_optimizer") as its tooltip
      if (role == Qt::DisplayRole) return qs(finding_title(f.kind));
      return text_cell(qs(f.kind), role);
    default:
      return {};
  }
}

// ---- OpsModel ----

OpsModel::OpsModel(QObject *parent)
    : ModelBase({tr("Op"), tr("Calls"), tr("Allocations"), tr("Bytes"), tr("Live at peak"),
                 tr("Labels at peak"), tr("Temporaries"), tr("Temporary bytes")},
                parent) {}

void OpsModel::setOps(std::vector<OpSummary> ops) {
  reset([&] { ops_ = std::move(ops); });
}

QVariant OpsModel::cell(int row, int column, int role) const {
  const OpSummary &o = ops_[row];
  switch (column) {
    case Name:
      if (role == Qt::ToolTipRole) {
        const QString labels = summarize_labels(o.labels_at_peak).text;
        return labels.isEmpty() ? qs(o.name) : tr("%1 in %2").arg(qs(o.name), labels);
      }
      return text_cell(qs(o.name), role);
    case Calls:
      return count_cell(o.calls, role);
    case Allocations:
      return count_cell(o.allocations, role);
    case Bytes:
      return bytes_cell(o.bytes, role);
    case LiveAtPeak:
      return bytes_cell(o.live_at_peak, role);
    case Labels: {
      const LabelSummary summary = summarize_labels(o.labels_at_peak);
      if (role == Qt::ToolTipRole) return summary.tip;
      return text_cell(summary.text, role);
    }
    case Temporaries:
      return count_cell(o.temporaries, role);
    case TemporaryBytes:
      return bytes_cell(o.temporary_bytes, role);
    default:
      return {};
  }
}

// ---- WhatIfModel ----

WhatIfModel::WhatIfModel(QObject *parent)
    : ModelBase({tr("Policy"), tr("Predicted peak"), tr("Measured peak"), tr("Saving"), tr("Note")},
                parent) {}

void WhatIfModel::setData(WhatIfData data) {
  reset([&] { data_ = std::move(data); });
}

QVariant WhatIfModel::cell(int row, int column, int role) const {
  const WhatIfRow &r = data_.rows[row];
  switch (column) {
    case Policy:
      return text_cell(qs(r.policy), role);
    case Predicted:
      if (!r.applicable)
        return role == Qt::DisplayRole ? QVariant(tr("not predicted")) : QVariant();
      return bytes_cell(r.predicted_peak, role);
    case Measured:
      return bytes_cell(data_.measured_peak, role);
    case Saving: {
      if (!r.applicable) return {};
      int64_t saving =
          static_cast<int64_t>(data_.measured_peak) - static_cast<int64_t>(r.predicted_peak);
      if (role == SortRole) return QVariant::fromValue<qlonglong>(saving);
      if (role == Qt::DisplayRole)
        return (saving < 0 ? "-" : "") + format_bytes_q(static_cast<uint64_t>(std::llabs(saving)));
      if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    }
    case Note:
      return text_cell(qs(r.note), role);
    default:
      return {};
  }
}

// ---- DiffModel ----

DiffModel::DiffModel(QObject *parent)
    : ModelBase(
          {tr("Kind"), tr("Name"), tr("Base"), tr("This trace"), tr("Change"), tr("Change %")},
          parent) {}

void DiffModel::setRows(std::vector<DiffRow> rows) {
  reset([&] { rows_ = std::move(rows); });
}

QVariant DiffModel::cell(int row, int column, int role) const {
  const DiffRow &r = rows_[row];
  int64_t delta = static_cast<int64_t>(r.current) - static_cast<int64_t>(r.base);
  switch (column) {
    case Kind:
      return text_cell(qs(r.kind), role);
    case Name:
      return text_cell(qs(r.name), role);
    case Base:
      return bytes_cell(r.base, role);
    case Current:
      return bytes_cell(r.current, role);
    case Delta:
      if (role == SortRole) return QVariant::fromValue<qlonglong>(delta);
      if (role == Qt::DisplayRole)
        return QString(delta > 0   ? "+"
                       : delta < 0 ? "-"
                                   : "") +
               format_bytes_q(static_cast<uint64_t>(std::llabs(delta)));
      if (role == Qt::ForegroundRole && delta != 0)
        return QBrush(delta > 0 ? QColor(0xB2, 0x3A, 0x00) : QColor(0x00, 0x6E, 0x50));
      if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    case DeltaPercent: {
      if (r.base == 0)
        return role == Qt::DisplayRole && r.current ? QVariant(tr("new")) : QVariant();
      double pct = 100.0 * static_cast<double>(delta) / static_cast<double>(r.base);
      if (role == SortRole) return pct;
      if (role == Qt::DisplayRole) return QString::asprintf("%+.1f %%", pct);
      if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    }
    default:
      return {};
  }
}

}  // namespace adprof::gui
