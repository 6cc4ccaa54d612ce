#include "replay_report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cli.h"
#include "sam/error.h"

namespace sam::tools {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kGeneratorMark = "<meta name=\"generator\" content=\"sam-replay\"/>";

// ------------------------------------------------------------------ text

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// A number exactly as the JSON output writes it (round-trips to the same double).
std::string Exact(double v) { return json(v).dump(); }

std::string Fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

// Pixel coordinates.
std::string Px(double v) { return Fixed(v, 2); }

const char* Colour(size_t i) {
  static constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                             "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                             "#9c755f", "#bab0ac"};
  return kPalette[i % std::size(kPalette)];
}

// ------------------------------------------------------------------ axes

struct Axis {
  double min = 0, max = 1;
  std::vector<double> ticks;
};

// An axis from `lo` to a round number at or above `hi`, with about five ticks.
Axis NiceAxis(double lo, double hi) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 2.5, 4.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  Axis a;
  a.min = lo;
  a.max = lo + std::ceil((hi - lo) / step - 1e-9) * step;
  for (double t = lo; t <= a.max + step * 1e-6; t += step) a.ticks.push_back(t);
  return a;
}

std::string TickLabel(double v) {
  if (std::abs(v - std::round(v)) < 1e-9) return Fixed(v, 0);
  return std::abs(v * 10 - std::round(v * 10)) < 1e-6 ? Fixed(v, 1) : Fixed(v, 2);
}

// The plot area of a chart and its SVG text.
class Chart {
 public:
  static constexpr double kWidth = 760, kHeight = 320;
  static constexpr double kLeft = 60, kRight = 170, kTop = 16, kBottom = 52;

  Chart(std::string id, std::string description) : id_(std::move(id)) {
    svg_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
         << kHeight << "\" viewBox=\"0 0 " << kWidth << " " << kHeight
         << "\" role=\"img\" data-chart=\"" << Escape(id_) << "\"><title>"
         << Escape(description) << "</title>\n";
  }
  double plot_width() const { return kWidth - kLeft - kRight; }
  double plot_height() const { return kHeight - kTop - kBottom; }
  double X(const Axis& a, double v) const {
    return kLeft + (v - a.min) / (a.max - a.min) * plot_width();
  }
  double Y(const Axis& a, double v) const {
    return kTop + plot_height() - (v - a.min) / (a.max - a.min) * plot_height();
  }

  void YAxis(const Axis& a, const std::string& label) {
    for (double t : a.ticks) {
      svg_ << "<line class=\"grid\" x1=\"" << Px(kLeft) << "\" x2=\"" << Px(kLeft + plot_width())
           << "\" y1=\"" << Px(Y(a, t)) << "\" y2=\"" << Px(Y(a, t)) << "\"/>"
           << "<text class=\"tick\" x=\"" << Px(kLeft - 6) << "\" y=\"" << Px(Y(a, t) + 4)
           << "\" text-anchor=\"end\">" << TickLabel(t) << "</text>\n";
    }
    svg_ << "<text class=\"axis\" transform=\"translate(14," << Px(kTop + plot_height() / 2)
         << ") rotate(-90)\" text-anchor=\"middle\">" << Escape(label) << "</text>\n";
  }
  // Numeric x ticks.
  void XAxis(const Axis& a, const std::string& label) {
    for (double t : a.ticks)
      XTick(X(a, t), TickLabel(t));
    XLabel(label);
  }
  void XTick(double x, const std::string& text) {
    const double y = kTop + plot_height();
    svg_ << "<line class=\"axisline\" x1=\"" << Px(x) << "\" x2=\"" << Px(x) << "\" y1=\""
         << Px(y) << "\" y2=\"" << Px(y + 4) << "\"/><text class=\"tick\" x=\"" << Px(x)
         << "\" y=\"" << Px(y + 17) << "\" text-anchor=\"middle\">" << Escape(text)
         << "</text>\n";
  }
  void XLabel(const std::string& label) {
    svg_ << "<line class=\"axisline\" x1=\"" << Px(kLeft) << "\" x2=\"" << Px(kLeft + plot_width())
         << "\" y1=\"" << Px(kTop + plot_height()) << "\" y2=\"" << Px(kTop + plot_height())
         << "\"/><text class=\"axis\" x=\"" << Px(kLeft + plot_width() / 2) << "\" y=\""
         << Px(kHeight - 10) << "\" text-anchor=\"middle\">" << Escape(label) << "</text>\n";
  }
  void Legend(const std::vector<std::string>& names) {
    double y = kTop + 6;
    for (size_t i = 0; i < names.size(); ++i, y += 18) {
      svg_ << "<rect x=\"" << Px(kWidth - kRight + 16) << "\" y=\"" << Px(y) << "\" width=\"12\" "
           << "height=\"12\" fill=\"" << Colour(i) << "\"/><text class=\"legend\" x=\""
           << Px(kWidth - kRight + 34) << "\" y=\"" << Px(y + 10) << "\">" << Escape(names[i])
           << "</text>\n";
    }
  }
  // The attributes every mark carries.
  std::string Data(const std::string& policy, const std::string& key, double value) const {
    return " data-chart=\"" + Escape(id_) + "\" data-policy=\"" + Escape(policy) +
           "\" data-key=\"" + Escape(key) + "\" data-value=\"" + Exact(value) + "\"";
  }
  std::ostringstream& svg() { return svg_; }
  std::string Finish() {
    svg_ << "</svg>\n";
    return svg_.str();
  }

 private:
  std::string id_;
  std::ostringstream svg_;
};

// A line per series through (x, y) points, each point a circle with its data.
struct LinePoint {
  double x, y;
  std::string key, title, extra;  // extra: more attributes (" data-x=...")
};
struct LineSeries {
  std::string name;
  std::vector<LinePoint> points;
};

void DrawLines(Chart& chart, const Axis& x, const Axis& y, const std::vector<LineSeries>& series) {
  for (size_t s = 0; s < series.size(); ++s) {
    std::string path;
    for (const LinePoint& p : series[s].points)
      path += (path.empty() ? "M" : " L") + Px(chart.X(x, p.x)) + "," + Px(chart.Y(y, p.y));
    if (series[s].points.size() > 1)
      chart.svg() << "<path class=\"line\" d=\"" << path << "\" stroke=\"" << Colour(s)
                  << "\"/>\n";
    for (const LinePoint& p : series[s].points)
      chart.svg() << "<circle cx=\"" << Px(chart.X(x, p.x)) << "\" cy=\"" << Px(chart.Y(y, p.y))
                  << "\" r=\"3.5\" fill=\"" << Colour(s) << "\""
                  << chart.Data(series[s].name, p.key, p.y) << p.extra << "><title>"
                  << Escape(p.title) << "</title></circle>\n";
  }
  std::vector<std::string> names;
  for (const LineSeries& s : series) names.push_back(s.name);
  chart.Legend(names);
}

// ------------------------------------------------------------------ charts

std::string Name(const json& policy) { return policy.at("name").get<std::string>(); }

std::string MatChart(const json& policies) {
  std::vector<std::string> keys = {"all"};
  for (const json& p : policies)
    for (const auto& [c, _] : p.at("by_category").items())
      if (std::find(keys.begin(), keys.end(), c) == keys.end()) keys.push_back(c);
  double top = 1;
  for (const json& p : policies) top = std::max(top, p.at("mat").get<double>());
  Chart chart("mat", "MAT per policy and category");
  const Axis y = NiceAxis(0, top);
  chart.YAxis(y, "MAT (tokens per step)");
  const double group = chart.plot_width() / static_cast<double>(policies.size());
  const double bar = std::min(28.0, group * 0.8 / static_cast<double>(keys.size()));
  for (size_t i = 0; i < policies.size(); ++i) {
    const json& p = policies[i];
    const double left = Chart::kLeft + group * i + (group - bar * keys.size()) / 2;
    for (size_t k = 0; k < keys.size(); ++k) {
      const json* value = nullptr;
      if (k == 0) value = &p.at("mat");
      else if (p.at("by_category").contains(keys[k])) value = &p.at("by_category").at(keys[k]).at("mat");
      if (value == nullptr) continue;
      const double v = value->get<double>();
      chart.svg() << "<rect x=\"" << Px(left + bar * k) << "\" y=\"" << Px(chart.Y(y, v))
                  << "\" width=\"" << Px(bar - 1) << "\" height=\""
                  << Px(chart.Y(y, 0) - chart.Y(y, v)) << "\" fill=\"" << Colour(k) << "\""
                  << chart.Data(Name(p), keys[k], v) << "><title>"
                  << Escape(Name(p) + ", " + keys[k] + ": MAT " + Fixed(v, 3)) << "</title></rect>\n";
    }
    chart.XTick(Chart::kLeft + group * (i + 0.5), Name(p));
  }
  chart.XLabel("policy");
  chart.Legend(keys);
  return chart.Finish();
}

std::string DepthChart(const json& policies) {
  size_t depths = 1;
  std::vector<LineSeries> series;
  for (const json& p : policies) {
    LineSeries s{Name(p), {}};
    const json& d = p.at("accepted_at_depth");
    depths = std::max(depths, d.size());
    for (size_t i = 0; i < d.size(); ++i)
      s.points.push_back({static_cast<double>(i + 1), d[i].get<double>(), std::to_string(i + 1),
                          Name(p) + ": depth " + std::to_string(i + 1) + " reached in " +
                              Fixed(100 * d[i].get<double>(), 1) + "% of steps",
                          ""});
    series.push_back(std::move(s));
  }
  Chart chart("depth", "Acceptance by draft depth: share of steps whose accepted path reached it");
  const Axis x = NiceAxis(0, static_cast<double>(depths));
  const Axis y = NiceAxis(0, 1);
  chart.YAxis(y, "share of steps");
  chart.XAxis(x, "draft depth");
  DrawLines(chart, x, y, series);
  return chart.Finish();
}

// MAT (or the projected speed-up) against tokens verified per step.
std::string BudgetChart(const json& policies, const char* field, const char* id) {
  const bool speedup = std::strcmp(field, "projected_speedup") == 0;
  double max_x = 1, max_y = 1;
  std::vector<LineSeries> series;
  for (const json& p : policies) {
    LineSeries s{Name(p), {}};
    auto add = [&](const json& point, const std::string& key) {
      const double x = point.at("tokens_per_step").get<double>(), y = point.at(field).get<double>();
      max_x = std::max(max_x, x);
      max_y = std::max(max_y, y);
      s.points.push_back({x, y, key,
                          Name(p) + (key == "default" ? "" : ", draft size " + key) + ": " +
                              (speedup ? "speed-up " + Fixed(y, 2) + "x" : "MAT " + Fixed(y, 3)) +
                              " at " + Fixed(x, 1) + " tokens/step",
                          " data-x=\"" + Exact(x) + "\""});
    };
    if (p.contains("budget_curve")) {
      for (const json& point : p.at("budget_curve"))
        add(point, std::to_string(point.at("draft_size").get<size_t>()));
    } else {
      add(p, "default");
    }
    series.push_back(std::move(s));
  }
  Chart chart(id, speedup ? "Projected speed-up against tokens verified per step"
                          : "Budget curve: MAT against tokens verified per step");
  const Axis x = NiceAxis(0, max_x);
  const Axis y = NiceAxis(speedup ? 0 : 1, max_y);
  chart.YAxis(y, speedup ? "projected speed-up (x)" : "MAT (tokens per step)");
  chart.XAxis(x, "tokens verified per step");
  DrawLines(chart, x, y, series);
  return chart.Finish();
}

std::string SourceChart(const json& policies) {
  std::vector<std::string> sources;
  for (const json& p : policies)
    for (const auto& [s, _] : p.at("by_source").items())
      if (std::find(sources.begin(), sources.end(), s) == sources.end()) sources.push_back(s);
  Chart chart("sources", "Each source's share of steps (bar width) and MAT (label)");
  const Axis x = NiceAxis(0, 1);
  const double row = chart.plot_height() / static_cast<double>(policies.size());
  const double bar = std::min(26.0, row * 0.75);
  for (size_t i = 0; i < policies.size(); ++i) {
    const json& p = policies[i];
    const double top = Chart::kTop + row * i + (row - bar) / 2;
    double at = 0;
    for (size_t k = 0; k < sources.size(); ++k) {
      if (!p.at("by_source").contains(sources[k])) continue;
      const json& s = p.at("by_source").at(sources[k]);
      const double share = s.at("share").get<double>(), mat = s.at("mat").get<double>();
      const double x0 = chart.X(x, at), x1 = chart.X(x, at + share);
      chart.svg() << "<rect x=\"" << Px(x0) << "\" y=\"" << Px(top) << "\" width=\""
                  << Px(x1 - x0) << "\" height=\"" << Px(bar) << "\" fill=\"" << Colour(k)
                  << "\"" << chart.Data(Name(p), sources[k], share) << " data-mat=\""
                  << Exact(mat) << "\"><title>"
                  << Escape(Name(p) + ", " + sources[k] + ": " + Fixed(100 * share, 1) +
                            "% of steps, MAT " + Fixed(mat, 2))
                  << "</title></rect>\n";
      if (x1 - x0 > 34)
        chart.svg() << "<text class=\"inbar\" x=\"" << Px((x0 + x1) / 2) << "\" y=\""
                    << Px(top + bar / 2 + 4) << "\" text-anchor=\"middle\">" << Fixed(mat, 2)
                    << "</text>\n";
      at += share;
    }
    chart.svg() << "<text class=\"tick\" x=\"" << Px(Chart::kLeft - 6) << "\" y=\""
                << Px(top + bar / 2 + 4) << "\" text-anchor=\"end\">" << Escape(Name(p))
                << "</text>\n";
  }
  for (double t : x.ticks) chart.XTick(chart.X(x, t), Fixed(100 * t, 0) + "%");
  chart.XLabel("share of steps (label: the source's MAT)");
  chart.Legend(sources);
  return chart.Finish();
}

std::string StepTimeChart(const json& policies) {
  std::vector<double> edges;
  std::vector<LineSeries> series;
  double top = 0;
  for (const json& p : policies) {
    const json& h = p.at("step_us_histogram");
    edges = h.at("edges_us").get<std::vector<double>>();
    const auto counts = h.at("counts").get<std::vector<uint64_t>>();
    uint64_t total = 0;
    for (uint64_t c : counts) total += c;
    LineSeries s{Name(p), {}};
    for (size_t b = 0; b < counts.size(); ++b) {
      const double share = total ? static_cast<double>(counts[b]) / total : 0.0;
      top = std::max(top, share);
      const std::string range = b + 1 < edges.size()
                                    ? TickLabel(edges[b]) + "-" + TickLabel(edges[b + 1]) + " us"
                                    : ">= " + TickLabel(edges[b]) + " us";
      s.points.push_back({static_cast<double>(b), share, std::to_string(b),
                          Name(p) + ": " + Fixed(100 * share, 1) + "% of steps took " + range,
                          " data-count=\"" + std::to_string(counts[b]) + "\""});
    }
    series.push_back(std::move(s));
  }
  Chart chart("steptime", "Step time (propose + commit) histogram");
  Axis x;
  x.min = -0.5;
  x.max = static_cast<double>(edges.size()) - 0.5;
  const Axis y = NiceAxis(0, std::max(top, 0.01));
  chart.YAxis(y, "share of steps");
  for (size_t b = 0; b < edges.size(); ++b)
    chart.XTick(chart.X(x, static_cast<double>(b)),
                b == 0 ? "<" + TickLabel(edges[1]) : TickLabel(edges[b]));
  chart.XLabel("step time, us (bins from the tick to the next one)");
  DrawLines(chart, x, y, series);
  return chart.Finish();
}

std::string SummaryTable(const json& run) {
  const json& policies = run.at("policies");
  const bool speedup = !policies.empty() && policies[0].contains("projected_speedup");
  std::ostringstream t;
  t << "<table><thead><tr><th>policy</th><th>MAT</th><th>tokens/step</th><th>draft share</th>"
       "<th>propose p50 / p99 (us)</th><th>commit p50 (us)</th>"
    << (speedup ? "<th>projected speed-up</th>" : "") << "</tr></thead><tbody>\n";
  for (const json& p : policies) {
    t << "<tr><td>" << Escape(Name(p)) << (p.value("cost_aware", false) ? " (cost-aware)" : "")
      << "</td><td>" << Fixed(p.at("mat").get<double>(), 3) << "</td><td>"
      << Fixed(p.at("tokens_per_step").get<double>(), 2) << "</td><td>"
      << Fixed(100 * p.at("draft_share").get<double>(), 1) << "%</td><td>"
      << Fixed(p.at("propose_us_p50").get<double>(), 1) << " / "
      << Fixed(p.at("propose_us_p99").get<double>(), 1) << "</td><td>"
      << Fixed(p.at("commit_us_p50").get<double>(), 1) << "</td>";
    if (speedup) t << "<td>" << Fixed(p.at("projected_speedup").get<double>(), 2) << "x</td>";
    t << "</tr>\n";
  }
  t << "</tbody></table>\n";
  return t.str();
}

}  // namespace

void CheckReportDir(const std::string& dir, const std::vector<std::string>& inputs) {
  if (dir.empty()) throw UsageError("--report: empty directory path");
  const std::string page = (fs::path(dir) / kReportPage).string();
  struct stat st = {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT)
      throw sam::Error(sam::ErrorCode::kIo, "--report " + dir + ": " + std::strerror(errno));
    // Missing: created at the end; its parent must exist and take new entries.
    CheckOutputPath("--report", fs::path(dir).lexically_normal().string(), inputs);
    return;
  }
  if (S_ISLNK(st.st_mode))
    throw UsageError("--report " + dir +
                     " is a symbolic link; give the directory itself (or remove the link)");
  if (!S_ISDIR(st.st_mode))
    throw UsageError("--report " + dir + " exists and is not a directory");
  CheckOutputPath("--report", page, inputs);
  std::ifstream existing(page, std::ios::binary);
  if (existing) {
    std::string head(4096, '\0');
    existing.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(existing.gcount()));
    if (head.find(kGeneratorMark) == std::string::npos)
      throw UsageError("--report: " + page +
                       " exists and was not written by sam-replay; refusing to replace it "
                       "(choose another directory or remove the file)");
  }
}

std::string RenderReport(const json& run, const std::string& source) {
  const json& policies = run.at("policies");
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
    << "<meta charset=\"utf-8\"/>\n" << kGeneratorMark << "\n"
    << "<title>sam-replay report: " << Escape(source) << "</title>\n<style>\n"
       "body{font-family:system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;"
       "margin:24px auto;max-width:800px;color:#222}\n"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px}p.note{color:#555;font-size:13px}\n"
       "table{border-collapse:collapse;font-size:13px}th,td{padding:3px 8px;"
       "border-bottom:1px solid #ddd;text-align:right}th:first-child,td:first-child"
       "{text-align:left}\n"
       "svg{display:block;margin:6px 0}svg text{font-family:inherit;fill:#333}"
       ".tick{font-size:11px}.axis{font-size:12px}.legend{font-size:12px}"
       ".inbar{font-size:11px;fill:#fff}.grid{stroke:#e4e4e4}.axisline{stroke:#888}"
       ".line{fill:none;stroke-width:2}\n</style>\n</head>\n<body>\n"
    << "<h1>sam-replay report</h1>\n<p>" << run.at("traces").get<size_t>() << " traces from <code>"
    << Escape(source) << "</code>; exact greedy replay, MAT counts the bonus token (plain "
    << "decoding = 1.00).";
  if (run.contains("cost_curve"))
    h << " Cost curve: <code>" << Escape(run.at("cost_curve").at("file").get<std::string>())
      << "</code> (projected speed-up = tokens / the steps' verification cost in units of t(1)).";
  h << "</p>\n";
  if (run.contains("run")) {  // what was replayed: indexes, traces, policies, options
    const json& r = run.at("run");
    h << "<table class=\"run\">\n";
    for (const auto& index : r.at("indexes"))
      h << "<tr><td>index</td><td><code>" << Escape(index.get<std::string>()) << "</code></td></tr>\n";
    h << "<tr><td>traces</td><td><code>" << Escape(r.at("traces_file").get<std::string>())
      << "</code></td></tr>\n<tr><td>policies</td><td>";
    for (size_t i = 0; i < policies.size(); ++i)
      h << (i ? ", " : "") << "<code>" << Escape(policies[i].at("name").get<std::string>()) << "</code>";
    h << "</td></tr>\n<tr><td>options</td><td>";
    if (r.at("options").empty()) h << "the defaults";
    bool first = true;
    for (const auto& [name, value] : r.at("options").items()) {
      h << (first ? "" : " ") << "<code>" << Escape(name);
      if (value.is_array())
        for (const auto& v : value) h << " " << Escape(v.get<std::string>());
      h << "</code>";
      first = false;
    }
    h << "</td></tr>\n</table>\n";
  }
  h << SummaryTable(run);
  h << "<h2>MAT per policy and category</h2>\n" << MatChart(policies);
  h << "<h2>Acceptance by draft depth</h2>\n" << DepthChart(policies)
    << "<p class=\"note\">Share of steps whose accepted path reached each depth; MAT = 1 + "
       "the sum over depths.</p>\n";
  h << "<h2>Budget curve</h2>\n" << BudgetChart(policies, "mat", "budget");
  const bool curve = !policies.empty() && policies[0].contains("budget_curve");
  h << "<p class=\"note\">"
    << (curve ? "One point per draft size (--draft-sizes); hover a point for its size."
              : "One point per policy at its default draft size (add --draft-sizes for the "
                "curve).")
    << "</p>\n";
  if (curve && policies[0].at("budget_curve").at(0).contains("projected_speedup"))
    h << "<h2>Projected speed-up</h2>\n"
      << BudgetChart(policies, "projected_speedup", "speedup");
  h << "<h2>Sources</h2>\n" << SourceChart(policies);
  h << "<h2>Step time</h2>\n" << StepTimeChart(policies)
    << "<p class=\"note\">Propose + commit per step on this machine (verification excluded); "
       "timings vary from run to run.</p>\n";
  h << "</body>\n</html>\n";
  return h.str();
}

std::string WriteReport(const std::string& dir, const json& run, const std::string& source) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) {
    fs::create_directory(dir, ec);
    if (ec)
      throw sam::Error(sam::ErrorCode::kIo, "--report " + dir + ": cannot create the directory: " +
                                                ec.message());
  }
  const std::string page = (fs::path(dir) / kReportPage).string();
  AtomicOutputFile file(page);
  file.stream() << RenderReport(run, source);
  file.Commit();
  return page;
}

}  // namespace sam::tools
