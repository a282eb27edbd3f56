#pragma once

/// Prices (USD per million input and output tokens) by model, with
/// per-source overrides, from config/prices.json or PGW_PRICING_PATH.

#include <caf/expected.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace pgw {

struct token_price {
  double input_per_million = 0;
  double output_per_million = 0;
  /// False for an entry that gives only a page price (OCR): its tokens are
  /// unpriced, not free.
  bool per_token = true;
  /// USD per page (OCR: an image is one page, a PDF its page count).
  std::optional<double> per_page;
};

class price_table {
public:
  /// Parses the config/prices.json format: {"models": {"name": {"input": x,
  /// "output": y}}, "sources": {"SCOPE/name": {...}}, "read_on": "..."};
  /// an entry may add `"page": z` (USD per page, OCR) or give only that;
  /// keys starting with `_` are comments. Prices must be finite and >= 0.
  /// Errors are `invalid_config` naming the JSON path.
  static caf::expected<price_table> parse(const std::string& json_text);

  /// Loads `path`; when `path` is the default "config/prices.json" and that
  /// file does not exist (a program run from another directory), the copy
  /// compiled into the library is used. Any other missing path is an error.
  static caf::expected<price_table> load(const std::string& path);

  /// The price of `source` in `scope` answering as `model`: a per-source
  /// override first, then the model by exact name, then by the longest
  /// model name that is a prefix of `model` ("gpt-4o-mini-2024-07-18" →
  /// "gpt-4o-mini").
  std::optional<token_price> find(const std::string& scope,
                                  const std::string& source,
                                  const std::string& model) const;

  /// input × in-price + output × out-price, in USD; nullopt when unpriced.
  std::optional<double> cost(const std::string& scope,
                             const std::string& source,
                             const std::string& model, int64_t input_tokens,
                             int64_t output_tokens) const;

  /// pages × the page price, in USD; nullopt when the entry found gives no
  /// page price.
  std::optional<double> page_cost(const std::string& scope,
                                  const std::string& source,
                                  const std::string& model,
                                  int64_t pages) const;

  const std::string& read_on() const {
    return read_on_;
  }

  size_t size() const {
    return models_.size() + sources_.size();
  }

private:
  std::map<std::string, token_price> models_;
  std::map<std::string, token_price> sources_; ///< "SCOPE/name"
  std::string read_on_;
};

} // namespace pgw
