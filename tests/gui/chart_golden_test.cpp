// The timeline chart, pixel for pixel: a synthetic timeline with everything the chart draws
// (phase bands, every grouping's stacked areas, step markers, the peak, an instant cursor, a
// selection, an op's and a site's highlighted series, a diff's base trace, the legend) painted
// onto an image (the on-screen path: the widget's own pixels) and into a QPicture (the vector
// path of PNG/SVG export), each compared by checksum with tests/gui/chart_golden.txt. A change
// to what the chart shows must regenerate that file deliberately:
//   ADPROF_UPDATE_GOLDEN=1 QT_QPA_PLATFORM=offscreen build/release/tests/gui/gui_chart_golden_test
// The checksums hold for the fonts of the build image (scripts/setup.sh): text is part of the
// pixels. On a mismatch the image is written next to the test binary, to look at.
#include <QCryptographicHash>
#include <QFile>
#include <QImage>
#include <QPainter>
#include <QPicture>
#include <QTest>
#include <QTextStream>
#include <map>

#include "timeline_widget.h"

using namespace adprof;
using namespace adprof::gui;

namespace {

// 600 samples over 3 s of three training steps: parameters flat, activations rising through
// each forward and falling through backward, optimizer state appearing in the first step, an
// op and a site series, device bytes; phase bands and step marks to match.
std::shared_ptr<Timeline> synthetic_timeline(double scale) {
  auto t = std::make_shared<Timeline>();
  t->start = 0;
  t->end = 3;
  t->op_names = {"matmul", "other ops"};
  t->site_names = {"model.cpp:42 make_layer"};
  for (int i = 0; i < 600; ++i) {
    TimelineSample s;
    s.time = i / 200.0;
    const int in_step = i % 200;
    const uint64_t rise = in_step < 100 ? in_step : 200 - in_step;
    s.by_role[ADPROF_ROLE_PARAMETER] = uint64_t(40000 * scale);
    s.by_role[ADPROF_ROLE_ACTIVATION] = uint64_t((3000 * rise + 500 * (i % 7)) * scale);
    s.by_role[ADPROF_ROLE_OPTIMIZER_STATE] = i >= 150 ? uint64_t(80000 * scale) : 0;
    s.by_role[ADPROF_ROLE_ADJOINT] = in_step >= 100 ? uint64_t(1500 * (in_step - 100) * scale) : 0;
    uint64_t host = 0;
    for (uint64_t v : s.by_role) host += v;
    s.host = host;
    s.by_phase[ADPROF_PHASE_FORWARD] = host / 2;
    s.by_phase[ADPROF_PHASE_BACKWARD] = host - host / 2;
    s.by_op = {s.by_role[ADPROF_ROLE_ACTIVATION], host - s.by_role[ADPROF_ROLE_ACTIVATION]};
    s.by_site = {s.by_role[ADPROF_ROLE_ADJOINT]};
    s.device = uint64_t(20000 * scale) + (i % 50) * 100;
    if (s.host > t->peak) {
      t->peak = s.host;
      t->peak_time = s.time;
    }
    t->samples.push_back(s);
  }
  for (int step = 0; step < 3; ++step) {
    t->steps.push_back({step + 0.0, uint64_t(step)});
    t->phases.push_back({step + 0.0, step + 0.5, ADPROF_PHASE_FORWARD});
    t->phases.push_back({step + 0.5, step + 0.9, ADPROF_PHASE_BACKWARD});
    t->phases.push_back({step + 0.9, step + 1.0, ADPROF_PHASE_OPTIMIZER});
  }
  return t;
}

struct Drawn {
  QByteArray raster, vector;
  QImage image;
};

Drawn draw(const TimelineWidget &w) {
  Drawn d;
  d.image = QImage(w.size(), QImage::Format_RGB32);
  QPainter p(&d.image);
  w.paintTo(p);
  p.end();
  d.raster =
      QCryptographicHash::hash(QByteArrayView(reinterpret_cast<const char *>(d.image.constBits()),
                                              d.image.sizeInBytes()),
                               QCryptographicHash::Sha256)
          .toHex();
  QPicture shapes;
  QPainter recorder(&shapes);
  w.paintTo(recorder);
  recorder.end();
  d.vector = QCryptographicHash::hash(QByteArrayView(shapes.data(), shapes.size()),
                                      QCryptographicHash::Sha256)
                 .toHex();
  return d;
}

}  // namespace

class ChartGoldenTest : public QObject {
  Q_OBJECT
 private slots:
  void chartIsUnchanged();
};

void ChartGoldenTest::chartIsUnchanged() {
  const QString golden_path = QStringLiteral(GOLDEN_FILE);
  const bool update = qEnvironmentVariableIsSet("ADPROF_UPDATE_GOLDEN");
  std::map<QString, Drawn> drawn;

  TimelineWidget w;
  w.resize(960, 420);
  w.setTimeline(synthetic_timeline(1.0));
  w.setOpTimeline(synthetic_timeline(1.0));
  w.setPeak(w.viewFrom() + 0.5, 340000);
  drawn["role"] = draw(w);
  w.setGrouping(TimelineWidget::Grouping::Op);
  drawn["op"] = draw(w);
  w.setGrouping(TimelineWidget::Grouping::Phase);
  drawn["phase"] = draw(w);
  w.setGrouping(TimelineWidget::Grouping::Device);
  drawn["device"] = draw(w);
  w.setGrouping(TimelineWidget::Grouping::Role);
  w.setInstant(1.25);
  w.setSelection(1.6, 2.2);
  w.setHighlightOp("matmul");
  w.setHighlightSite("model.cpp:42 make_layer");
  w.setBase(synthetic_timeline(0.7));
  drawn["overlays"] = draw(w);
  w.setHighlightOp("an op with no series");
  w.setView(0.8, 1.3);  // zoomed: step labels, finer ticks
  drawn["zoomed"] = draw(w);

  if (update) {
    QFile out(golden_path);
    QVERIFY2(out.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(golden_path));
    QTextStream s(&out);
    s << "# chart raster-sha256 vector-sha256 (tests/gui/chart_golden_test.cpp)\n";
    for (const auto &[name, d] : drawn) s << name << ' ' << d.raster << ' ' << d.vector << '\n';
    return;
  }
  QFile in(golden_path);
  QVERIFY2(in.open(QIODevice::ReadOnly), qPrintable("cannot read " + golden_path));
  std::map<QString, std::pair<QByteArray, QByteArray>> expected;
  for (const QByteArray &line : in.readAll().split('\n')) {
    const QList<QByteArray> f = line.split(' ');
    if (line.startsWith('#') || f.size() != 3) continue;
    expected[QString::fromUtf8(f[0])] = {f[1], f[2]};
  }
  QCOMPARE(expected.size(), drawn.size());
  for (const auto &[name, d] : drawn) {
    const auto it = expected.find(name);
    QVERIFY2(it != expected.end(), qPrintable("no checksum for " + name));
    if (d.raster != it->second.first || d.vector != it->second.second) {
      const QString png = QStringLiteral("chart_golden_%1.png").arg(name);
      d.image.save(png);
      QFAIL(qPrintable(QStringLiteral("chart '%1' differs from %2 (%3 %4; image: %5)")
                           .arg(name, golden_path, d.raster != it->second.first ? "pixels" : "",
                                d.vector != it->second.second ? "shapes" : "", png)));
    }
  }
}

QTEST_MAIN(ChartGoldenTest)
#include "chart_golden_test.moc"
