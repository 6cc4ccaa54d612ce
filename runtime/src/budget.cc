#include "sam/runtime/budget.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "sam/error.h"
#include "sam/format/file_checks.h"
#include "sam/runtime/selection.h"  // kMaxDraftSize

namespace sam::runtime {

namespace {

// A cost curve has at most kMaxDraftSize rows; this bounds a file given by mistake.
constexpr size_t kMaxCostCurveFileBytes = size_t{1} << 20;

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string PointName(size_t i, const CostPoint& p) {
  return "point " + std::to_string(i) + " (" + std::to_string(p.tokens) + " tokens)";
}

// Throws unless points[i] follows the rules given points[0..i).
void CheckPoint(std::span<const CostPoint> points, size_t i, const ErrorContext& where) {
  const CostPoint& p = points[i];
  if (p.tokens < 1 || p.tokens > kMaxDraftSize)
    throw Error(ErrorCode::kBadValue, where,
                "tokens must be in 1.." + std::to_string(kMaxDraftSize));
  if (i == 0 && p.tokens != 1)
    throw Error(ErrorCode::kBadValue, where,
                "the first point must be 1 token (the curve is relative to t(1))");
  if (i > 0 && p.tokens <= points[i - 1].tokens)
    throw Error(ErrorCode::kBadValue, where,
                "tokens must increase from point to point (the previous has " +
                    std::to_string(points[i - 1].tokens) + ")");
  if (!(p.cost > 0.0) || !std::isfinite(p.cost))
    throw Error(ErrorCode::kBadValue, where, "cost must be a positive finite number");
}

}  // namespace

CostCurve CostCurve::FromPoints(std::span<const CostPoint> points, const std::string& source) {
  if (points.empty())
    throw Error(ErrorCode::kBadValue, {.file = source}, "a cost curve needs at least one point");
  for (size_t i = 0; i < points.size(); ++i)
    CheckPoint(points, i, {.file = source, .record = PointName(i, points[i])});
  CostCurve curve;
  curve.points_.assign(points.begin(), points.end());
  curve.relative_.resize(points.back().tokens);
  const double t1 = points.front().cost;
  curve.relative_[0] = 1.0;
  for (size_t i = 1; i < points.size(); ++i) {
    const CostPoint& a = points[i - 1];
    const CostPoint& b = points[i];
    for (size_t n = a.tokens + 1; n <= b.tokens; ++n) {
      const double f = static_cast<double>(n - a.tokens) / static_cast<double>(b.tokens - a.tokens);
      curve.relative_[n - 1] = (a.cost + f * (b.cost - a.cost)) / t1;
    }
  }
  return curve;
}

CostCurve CostCurve::Parse(std::string_view text, const std::string& source) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte-order mark
  std::vector<CostPoint> points;
  size_t line_no = 0;
  bool header_allowed = true;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = Trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const ErrorContext where{.file = source, .record = "line " + std::to_string(line_no)};
    const size_t comma = line.find(',');
    if (comma == std::string_view::npos || line.find(',', comma + 1) != std::string_view::npos)
      throw Error(ErrorCode::kBadRecord, where,
                  "expected two comma-separated numbers 'tokens,cost', found '" +
                      std::string(line.substr(0, 80)) + "'");
    const std::string_view first = Trim(line.substr(0, comma));
    const std::string_view second = Trim(line.substr(comma + 1));
    if (header_allowed && first == "tokens" && second == "cost") {
      header_allowed = false;
      continue;
    }
    header_allowed = false;
    CostPoint p;
    const auto [tokens_end, tokens_error] =
        std::from_chars(first.data(), first.data() + first.size(), p.tokens);
    if (first.empty() || tokens_error != std::errc() || tokens_end != first.data() + first.size())
      throw Error(ErrorCode::kBadRecord, ErrorContext{where.file, "", where.record, "tokens"},
                  "'" + std::string(first.substr(0, 40)) + "' is not a whole number");
    const auto [cost_end, cost_error] =
        std::from_chars(second.data(), second.data() + second.size(), p.cost);
    if (second.empty() || cost_error != std::errc() || cost_end != second.data() + second.size())
      throw Error(ErrorCode::kBadRecord, ErrorContext{where.file, "", where.record, "cost"},
                  "'" + std::string(second.substr(0, 40)) + "' is not a number");
    points.push_back(p);
    CheckPoint(points, points.size() - 1, where);
  }
  if (points.empty())
    throw Error(ErrorCode::kBadRecord, {.file = source},
                "no 'tokens,cost' rows (a cost curve needs at least the row for 1 token)");
  return FromPoints(points, source);
}

CostCurve CostCurve::Load(const std::string& path) {
  // Never blocks (a FIFO without a writer is refused), and a cost curve is small.
  const int fd = format::OpenRegularFile(path, "cost curve file");
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw Error(ErrorCode::kIo, {.file = path},
                  std::string("cannot read the cost curve file: ") + std::strerror(error));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxCostCurveFileBytes) {
      ::close(fd);
      throw Error(ErrorCode::kBadRecord, {.file = path},
                  "more than " + std::to_string(kMaxCostCurveFileBytes) +
                      " bytes: not a cost curve file");
    }
  }
  ::close(fd);
  return Parse(text, path);
}

CostCurve CostCurve::Flat(size_t up_to) {
  const CostPoint points[] = {{1, 1.0}, {up_to, 1.0}};
  return FromPoints(std::span<const CostPoint>(points, up_to > 1 ? 2 : 1));
}

double CostCurve::Relative(size_t n) const {
  if (relative_.empty()) return 1.0;
  if (n <= 1) return 1.0;
  if (n <= relative_.size()) return relative_[n - 1];
  return relative_.back() * static_cast<double>(n) / static_cast<double>(relative_.size());
}

std::string CostCurve::ToCsv(std::span<const CostPoint> points, std::string_view comment) {
  std::string out;
  if (!comment.empty()) {
    std::string_view rest = comment;
    while (!rest.empty()) {
      const size_t end = rest.find('\n');
      out += "# ";
      out += rest.substr(0, end);
      out += '\n';
      rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    }
  }
  out += "tokens,cost\n";
  char buffer[64];
  for (const CostPoint& p : points) {
    std::snprintf(buffer, sizeof buffer, "%zu,%.10g\n", p.tokens, p.cost);
    out += buffer;
  }
  return out;
}

size_t ChooseTreeSize(std::span<const double> ranked_paths, const CostCurve& curve, double rate) {
  // E(n) = 1 + the first n - 1 path probabilities; every n is evaluated (the
  // curve need not be convex, so the objective may have several local maxima).
  double expected = 1.0;
  size_t best = 1;
  double best_value = rate > 0.0 ? expected - rate : expected;  // t(1)/t(1) = 1
  for (size_t n = 2; n <= ranked_paths.size() + 1; ++n) {
    expected += ranked_paths[n - 2];
    const double cost = curve.Relative(n);
    const double value = rate > 0.0 ? expected - rate * cost : expected / cost;
    if (value > best_value) {
      best_value = value;
      best = n;
    }
  }
  return best;
}

double ProjectedSpeedup(std::span<const uint64_t> steps_by_size, uint64_t tokens,
                        const CostCurve& curve) {
  double cost = 0.0;
  for (size_t n = 0; n < steps_by_size.size(); ++n)
    cost += static_cast<double>(steps_by_size[n]) * curve.Relative(n);
  return cost > 0.0 ? static_cast<double>(tokens) / cost : 0.0;
}

}  // namespace sam::runtime
