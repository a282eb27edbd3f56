#include "actors/structured_ladder.hpp"

#include <algorithm>
#include <cctype>

namespace pgw {

namespace {

/// Position on the ladder, strongest first.
int strength(schema_strategy x) {
  switch (x) {
    case schema_strategy::auto_select:
    case schema_strategy::json_schema:
      return 0;
    case schema_strategy::json_object:
      return 1;
    case schema_strategy::prompt:
      return 2;
  }
  return 2;
}

const std::vector<schema_strategy>& rungs_of(const source_config& src) {
  static const std::vector<schema_strategy> prompt_only{schema_strategy::prompt};
  return src.profile.structured.empty() ? prompt_only : src.profile.structured;
}

bool names_response_format(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text.find("response_format") != std::string::npos;
}

} // namespace

schema_strategy structured_ladder::rung_for(const source_config& src,
                                            schema_strategy requested) const {
  if (requested != schema_strategy::auto_select)
    return requested;
  std::lock_guard<std::mutex> guard{mtx_};
  auto cap = cap_.find(src.name);
  for (auto rung : rungs_of(src))
    if (cap == cap_.end() || strength(rung) >= strength(cap->second))
      return rung;
  return schema_strategy::prompt;
}

std::optional<schema_strategy>
structured_ladder::lower(const source_config& src, schema_strategy used) {
  if (used == schema_strategy::prompt)
    return std::nullopt;
  auto next = schema_strategy::prompt;
  for (auto rung : rungs_of(src))
    if (strength(rung) > strength(used)) {
      next = rung;
      break;
    }
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = cap_.find(src.name);
  if (i == cap_.end())
    i = cap_.emplace(src.name, next).first;
  else if (strength(i->second) < strength(next))
    i->second = next;
  return i->second;
}

bool rejects_response_format(const attempt_result& res) {
  if (res.kind != outcome::request_rejected
      && res.kind != outcome::source_rejected)
    return false;
  if (res.http_status < 400 || res.http_status > 499)
    return false;
  return names_response_format(res.error_message)
         || names_response_format(res.error_code);
}

std::vector<chat_message> reask_messages(
  const std::vector<chat_message>& original, const std::string& bad_answer,
  const std::vector<schema_issue>& issues) {
  auto out = original;
  auto echoed = bad_answer;
  if (echoed.size() > max_echoed_answer_bytes) {
    // Cut on a UTF-8 character boundary.
    auto cut = max_echoed_answer_bytes;
    while (cut > 0 && (static_cast<unsigned char>(echoed[cut]) & 0xC0) == 0x80)
      --cut;
    echoed = echoed.substr(0, cut) + "\n[answer truncated]";
  }
  out.push_back({"assistant", std::move(echoed), {}});
  out.push_back({"user",
                 "Your previous answer does not match the required JSON "
                 "Schema.\nValidation errors (JSON pointer: message):\n"
                   + format_issues(issues)
                   + "\nAnswer again with one JSON value only that conforms "
                     "to the schema, with no code fences and no text around "
                     "it.",
                 {}});
  return out;
}

} // namespace pgw
