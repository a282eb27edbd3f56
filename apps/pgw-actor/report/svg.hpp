#pragma once

/// A very small SVG writer: enough shapes for a chart (lines, rectangles,
/// text, paths), every attribute and text escaped. No plotting library.

#include <string>
#include <utility>
#include <vector>

namespace pgw::svg {

/// `text` with &, <, >, " and ' replaced by entities (attribute- and
/// text-safe).
std::string escape(const std::string& text);

/// A number for a coordinate: fixed, two decimals at most, no exponent.
std::string number(double x);

/// One SVG document of a fixed size; shapes are appended in order.
class document {
public:
  document(double width, double height);

  /// A straight line. `dash` is a stroke-dasharray ("" for solid).
  void line(double x1, double y1, double x2, double y2,
            const std::string& stroke, double width = 1,
            const std::string& dash = "");

  void rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& stroke = "none");

  /// Text at (x, y); `anchor` is start, middle or end. `rotate` turns it
  /// around its anchor (degrees).
  void text(double x, double y, const std::string& content,
            const std::string& anchor = "start", double size = 12,
            double rotate = 0);

  /// An unfilled path through `points` (M, then L segments); nothing for
  /// fewer than two points. `css_class` lands in the class attribute.
  void polyline_path(const std::vector<std::pair<double, double>>& points,
                     const std::string& stroke, double width,
                     const std::string& css_class,
                     const std::string& dash = "");

  /// The whole document, XML declaration included.
  std::string str() const;

private:
  double width_;
  double height_;
  std::string body_;
};

} // namespace pgw::svg
