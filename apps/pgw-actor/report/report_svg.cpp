// The telemetry report's latency CDF chart (SVG).

#include "apps/pgw-actor/report/report.hpp"
#include "apps/pgw-actor/report/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace pgw::report {

// -- SVG ------------------------------------------------------------------------

namespace {

const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                         "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                         "#bcbd22", "#17becf"};

/// "0.5 ms", "20 ms", "2 s": a tick value in plain words.
std::string tick_label(double ms) {
  if (ms < 1000)
    return fmt::format("{:g} ms", ms);
  return fmt::format("{:g} s", ms / 1000);
}

/// 1-2-5 tick values inside [lo, hi] (at least the two ends' neighbours).
std::vector<double> ticks_125(double lo, double hi) {
  std::vector<double> out;
  auto first = static_cast<int>(std::floor(std::log10(lo)));
  auto last = static_cast<int>(std::ceil(std::log10(hi)));
  for (int e = first; e <= last; ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      auto v = m * std::pow(10.0, e);
      if (v >= lo * 0.999 && v <= hi * 1.001)
        out.push_back(v);
    }
  return out;
}

} // namespace

std::string render_latency_cdf_svg(const report& r) {
  struct series {
    std::string label;
    const std::vector<double>* samples;
    size_t color = 0;
    bool failed = false; ///< drawn dashed
  };
  std::vector<series> all;
  size_t sources = 0;
  for (auto& sc : r.scopes)
    for (auto& g : sc.sources) {
      if (g.ok_latencies.empty() && g.failed_latencies.empty())
        continue;
      if (!g.ok_latencies.empty())
        all.push_back({fmt::format("{}/{} ok (n={})", g.scope, g.source,
                                   g.ok_latencies.size()),
                       &g.ok_latencies, sources, false});
      if (!g.failed_latencies.empty())
        all.push_back({fmt::format("{}/{} failed (n={})", g.scope, g.source,
                                   g.failed_latencies.size()),
                       &g.failed_latencies, sources, true});
      ++sources;
    }
  // The axis fits the data (a 10 % margin each side), 1-2-5 ticks; zero
  // latencies sit on the left edge.
  double lo = std::numeric_limits<double>::infinity();
  double hi = 0;
  for (auto& s : all)
    for (auto x : *s.samples) {
      if (x > 0)
        lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  if (!std::isfinite(lo) || hi <= 0) {
    lo = 1;
    hi = 10;
  }
  lo /= 1.1;
  hi *= 1.1;
  if (hi / lo < 2.5) { // a narrow range still gets a few ticks
    auto mid = std::sqrt(lo * hi);
    lo = mid / 1.6;
    hi = mid * 1.6;
  }
  auto log_lo = std::log10(lo);
  auto log_hi = std::log10(hi);

  const double width = 860;
  const double left = 70, right = 250, top = 40, bottom = 60;
  const double height = 480;
  const double plot_w = width - left - right;
  const double plot_h = height - top - bottom;
  auto x_of = [&](double ms) {
    auto v = std::max(ms, lo);
    auto t = (std::log10(v) - log_lo) / (log_hi - log_lo);
    return left + t * plot_w;
  };
  auto y_of = [&](double fraction) { return top + (1 - fraction) * plot_h; };

  svg::document doc{width, height};
  doc.rect(0, 0, width, height, "white");
  doc.text(left, 24, fmt::format("attempt latency CDF per source — {}",
                                 r.db_path),
           "start", 14);
  // Grid and ticks.
  for (auto v : ticks_125(lo, hi)) {
    auto x = x_of(v);
    doc.line(x, top, x, top + plot_h, "#dddddd", 1);
    doc.text(x, top + plot_h + 18, tick_label(v), "middle", 11);
  }
  for (int i = 0; i <= 4; ++i) {
    auto f = i / 4.0;
    auto y = y_of(f);
    doc.line(left, y, left + plot_w, y, "#dddddd", 1);
    doc.text(left - 8, y + 4, fmt::format("{:.2f}", f), "end", 11);
  }
  doc.line(left, top + plot_h, left + plot_w, top + plot_h, "#333333", 1);
  doc.line(left, top, left, top + plot_h, "#333333", 1);
  doc.text(left + plot_w / 2, height - 16, "latency (log scale)", "middle",
           12);
  doc.text(18, top + plot_h / 2,
           "fraction of attempts <= latency (failed: dashed)", "middle", 12,
           -90);
  if (all.empty())
    doc.text(left + plot_w / 2, top + plot_h / 2, "no attempts recorded",
             "middle", 14);
  // One step curve per source; long samples are thinned to <= 1000 steps.
  for (size_t k = 0; k < all.size(); ++k) {
    auto& xs = *all[k].samples;
    auto color = palette[all[k].color % (sizeof(palette) / sizeof(palette[0]))];
    auto n = xs.size();
    auto steps = std::min<size_t>(n, 1000);
    std::vector<std::pair<double, double>> points;
    points.emplace_back(x_of(xs.front()), y_of(0));
    for (size_t j = 1; j <= steps; ++j) {
      auto rank = (j * n + steps - 1) / steps; // ceil(j * n / steps)
      auto x = x_of(xs[rank - 1]);
      if (x != points.back().first)
        points.emplace_back(x, points.back().second);
      points.emplace_back(x, y_of(static_cast<double>(rank)
                                  / static_cast<double>(n)));
    }
    points.emplace_back(left + plot_w, y_of(1));
    doc.polyline_path(points, color, 2, all[k].failed ? "cdf failed" : "cdf",
                      all[k].failed ? "6 4" : "");
    auto ly = top + 10 + static_cast<double>(k) * 20;
    doc.line(left + plot_w + 20, ly, left + plot_w + 44, ly, color, 3,
             all[k].failed ? "6 4" : "");
    doc.text(left + plot_w + 50, ly + 4, all[k].label, "start", 12);
  }
  return doc.str();
}

} // namespace pgw::report
