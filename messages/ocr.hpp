#pragma once

/// The OCR call a caller sends to a gateway and the answer it gets.

#include "pgw/messages/chat.hpp"
#include "pgw/messages/type_ids.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <string>

namespace pgw {

/// `recognize_text` (layout = false) or `parse_layout` (layout = true) of one
/// image (PNG, JPEG or PDF bytes; the type is sniffed from the bytes).
struct ocr_request {
  std::string image;
  bool layout = false;
  /// Per-call bound of the whole call in seconds; unset = CALL_DEADLINE_S.
  caf::optional<double> deadline_s;
  /// Optional caller-chosen id; used to cancel the call.
  std::string call_id;
  /// Pins the call to this source of the scope (empty = any source).
  std::string source;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ocr_request& x) {
  return f(caf::meta::type_name("pgw.ocr_request"), x.image, x.layout,
           x.deadline_s, x.call_id, x.source);
}

/// The answer: the recognised text (markdown for a layout), and for a
/// layout the blocks as a JSON array text (`[{type, text, bbox?}]`, `[]`
/// when the backend gives none).
struct ocr_response {
  std::string text;
  std::string blocks_json;
  std::string source;
  std::string model;
  call_stats stats;
  std::string call_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ocr_response& x) {
  return f(caf::meta::type_name("pgw.ocr_response"), x.text, x.blocks_json,
           x.source, x.model, x.stats, x.call_id);
}

} // namespace pgw
