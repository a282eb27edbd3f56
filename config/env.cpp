// Env files and the process environment (SPEC §3).

#include "config/loader.hpp"
#include "config/file.hpp"
#include "messages/errors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace pgw {

namespace {

bool is_blank(char ch) {
  return ch == ' ' || ch == '\t';
}

std::string trim(const std::string& text) {
  size_t first = 0;
  size_t last = text.size();
  while (first < last && is_blank(text[first]))
    ++first;
  while (last > first && is_blank(text[last - 1]))
    --last;
  return text.substr(first, last - first);
}

bool is_key(const std::string& key) {
  if (key.empty())
    return false;
  auto head = static_cast<unsigned char>(key[0]);
  if (!std::isalpha(head) && head != '_')
    return false;
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c) && c != '_')
      return false;
  }
  return true;
}

/// True when what follows a closing quote is blank or a ` #` comment.
bool rest_is_comment(const std::string& rest) {
  auto tail = trim(rest);
  return tail.empty() || (tail[0] == '#' && (rest.empty() || is_blank(rest[0])));
}

/// Parses the value part of one line. Returns an empty string on success, or
/// the problem (never containing the value: it may be a secret).
std::string parse_value(const std::string& raw, std::string& out) {
  auto text = raw;
  size_t lead = 0;
  while (lead < text.size() && is_blank(text[lead]))
    ++lead;
  text.erase(0, lead);
  if (text.empty()) {
    out.clear();
    return {};
  }
  if (text[0] == '\'') {
    auto close = text.find('\'', 1);
    if (close == std::string::npos)
      return "unterminated single quote";
    if (!rest_is_comment(text.substr(close + 1)))
      return "unexpected text after the closing quote";
    out = text.substr(1, close - 1);
    return {};
  }
  if (text[0] == '"') {
    std::string value;
    for (size_t i = 1; i < text.size(); ++i) {
      char ch = text[i];
      if (ch == '"') {
        if (!rest_is_comment(text.substr(i + 1)))
          return "unexpected text after the closing quote";
        out = std::move(value);
        return {};
      }
      if (ch == '\\' && i + 1 < text.size()) {
        char next = text[++i];
        switch (next) {
          case '"':
          case '\\':
            value += next;
            break;
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          case 'r':
            value += '\r';
            break;
          default:
            // Unknown escapes stay as written ("C:\dir" keeps its backslash).
            value += '\\';
            value += next;
        }
        continue;
      }
      value += ch;
    }
    return "unterminated double quote";
  }
  // Unquoted: a comment starts at a '#' preceded by a blank ("A= # x" is
  // empty, "A=#x" is "#x").
  auto value = raw;
  for (size_t i = 1; i < value.size(); ++i)
    if (value[i] == '#' && is_blank(value[i - 1])) {
      value.erase(i);
      break;
    }
  out = trim(value);
  return {};
}

} // namespace

caf::expected<env_map> read_env_file(const std::string& path,
                                     std::vector<std::string>* warnings) {
  auto content = read_config_file(path, fmt::format("env file {}", path));
  if (!content)
    return std::move(content.error());
  std::istringstream in{*content};
  env_map result;
  // Key → the lines that set it, keys in the order they first appear.
  std::map<std::string, std::vector<size_t>> lines_of;
  std::vector<std::string> order;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0)
      line.erase(0, 3); // UTF-8 byte order mark
    auto text = trim(line);
    if (text.empty() || text[0] == '#')
      continue;
    if (text.rfind("export", 0) == 0 && text.size() > 6 && is_blank(text[6]))
      text = trim(text.substr(7));
    auto eq = text.find('=');
    if (eq == std::string::npos)
      return make_error(error_code::invalid_config,
                        fmt::format("env file {}:{}: malformed line "
                                    "(expected KEY=VALUE)",
                                    path, line_no));
    auto key = trim(text.substr(0, eq));
    if (!is_key(key))
      return make_error(error_code::invalid_config,
                        fmt::format("env file {}:{}: malformed line (a key "
                                    "is letters, digits and '_', not "
                                    "starting with a digit)",
                                    path, line_no));
    std::string value;
    auto problem = parse_value(text.substr(eq + 1), value);
    if (!problem.empty())
      return make_error(error_code::invalid_config,
                        fmt::format("env file {}:{}: {}: {}", path, line_no,
                                    key, problem));
    auto& lines = lines_of[key];
    if (lines.empty())
      order.push_back(key);
    lines.push_back(line_no);
    result[key] = std::move(value);
  }
  // The last value still wins, as in a shell; but an earlier line that is
  // silently dead is usually an edit that went to the wrong copy.
  if (warnings != nullptr)
    for (auto& key : order)
      if (auto& lines = lines_of[key]; lines.size() > 1)
        warnings->push_back(fmt::format("env file {}: {} is set on lines {} "
                                        "and {}; the last one wins",
                                        path, key,
                                        fmt::join(lines.begin(),
                                                  lines.end() - 1, ", "),
                                        lines.back()));
  return result;
}

env_map process_environment() {
  env_map result;
  for (char** entry = environ; entry != nullptr && *entry != nullptr;
       ++entry) {
    std::string text = *entry;
    auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
      continue;
    result.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return result;
}

caf::expected<env_map>
load_environment(const std::optional<std::string>& env_file,
                 std::vector<std::string>* warnings) {
  env_map result;
  std::optional<std::string> path = env_file;
  if (!path) {
    std::error_code ec;
    if (std::filesystem::exists("./.env", ec))
      path = "./.env";
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(*path, ec))
      return make_error(error_code::invalid_config,
                        fmt::format("env file {}: does not exist", *path));
  }
  if (path) {
    auto file = read_env_file(*path, warnings);
    if (!file)
      return file.error();
    result = std::move(*file);
  }
  for (auto& [key, value] : process_environment())
    result[key] = value;
  return result;
}

} // namespace pgw
