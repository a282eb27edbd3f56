#include "apps/pgw-actor/report/svg.hpp"

#include <fmt/format.h>

#include <cmath>

namespace pgw::svg {

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML
        // 1.0 at all; a source name never has them, but be safe.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n')
          out += '?';
        else
          out += ch;
    }
  }
  return out;
}

std::string number(double x) {
  if (!std::isfinite(x))
    x = 0;
  auto text = fmt::format("{:.2f}", x);
  // Trim trailing zeros and a trailing dot: "12.50" -> "12.5", "3.00" -> "3".
  while (!text.empty() && text.back() == '0')
    text.pop_back();
  if (!text.empty() && text.back() == '.')
    text.pop_back();
  if (text == "-0")
    text = "0";
  return text;
}

document::document(double width, double height)
  : width_(width), height_(height) {
}

void document::line(double x1, double y1, double x2, double y2,
                    const std::string& stroke, double width,
                    const std::string& dash) {
  body_ += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" "
                       "stroke=\"{}\" stroke-width=\"{}\"",
                       number(x1), number(y1), number(x2), number(y2),
                       escape(stroke), number(width));
  if (!dash.empty())
    body_ += fmt::format(" stroke-dasharray=\"{}\"", escape(dash));
  body_ += "/>\n";
}

void document::rect(double x, double y, double w, double h,
                    const std::string& fill, const std::string& stroke) {
  body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
                       "fill=\"{}\" stroke=\"{}\"/>\n",
                       number(x), number(y), number(w), number(h),
                       escape(fill), escape(stroke));
}

void document::text(double x, double y, const std::string& content,
                    const std::string& anchor, double size, double rotate) {
  body_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\" "
                       "font-size=\"{}\"",
                       number(x), number(y), escape(anchor), number(size));
  if (rotate != 0)
    body_ += fmt::format(" transform=\"rotate({} {} {})\"", number(rotate),
                         number(x), number(y));
  body_ += fmt::format(">{}</text>\n", escape(content));
}

void document::polyline_path(
  const std::vector<std::pair<double, double>>& points,
  const std::string& stroke, double width, const std::string& css_class,
  const std::string& dash) {
  if (points.size() < 2)
    return;
  std::string d;
  for (size_t i = 0; i < points.size(); ++i) {
    d += i == 0 ? "M" : " L";
    d += number(points[i].first);
    d += ' ';
    d += number(points[i].second);
  }
  body_ += fmt::format("<path class=\"{}\" d=\"{}\" fill=\"none\" "
                       "stroke=\"{}\" stroke-width=\"{}\" "
                       "stroke-linejoin=\"round\"",
                       escape(css_class), d, escape(stroke), number(width));
  if (!dash.empty())
    body_ += fmt::format(" stroke-dasharray=\"{}\"", escape(dash));
  body_ += "/>\n";
}

std::string document::str() const {
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<svg xmlns=\"http://www.w3.org/2000/svg\" "
                     "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                     "font-family=\"sans-serif\">\n"
                     "{2}</svg>\n",
                     number(width_), number(height_), body_);
}

} // namespace pgw::svg
