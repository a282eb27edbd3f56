#include "apps/pgw-upstream-sim/scenario.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <stdexcept>

namespace pgw::sim::detail {

const char* const builtin_scenario_json = R"json({"models": {
  "ok":        {"tokens": 20},
  "slow":      {"ttft_ms": 2000, "token_ms": 5, "tokens": 50},
  "flaky":     {"faults": [{"p": 0.5, "status": 503}]},
  "down":      {"faults": [{"p": 1.0, "status": 503}]},
  "hang":      {"faults": [{"p": 1.0, "hang_ms": 600000}]},
  "bimodal":   {"latency": {"dist": "lognormal", "median_ms": 800, "sigma": 0.5},
                "faults": [{"p": 0.13, "hang_ms": 90000}]},
  "ra2":       {"script": [{"status": 429, "retry_after": "2"}, {}]},
  "throttled": {"faults": [{"p": 1.0, "status": 429}]},
  "cut":       {"stream": {"cut_after": 5}},
  "stall":     {"stream": {"stall_after": 5, "stall_ms": 30000}},
  "malformed": {"stream": {"malformed_at": 3}},
  "nodone":    {"stream": {"omit_done": true}},
  "reject":    {"faults": [{"p": 1.0, "status": 400, "code": "content_policy_violation"}]},
  "ctx":       {"faults": [{"p": 1.0, "status": 400, "code": "context_length_exceeded"}]},
  "dead":      {"faults": [{"p": 1.0, "status": 429, "code": "insufficient_quota"}]},
  "unauth":    {"faults": [{"p": 1.0, "status": 401}]},
  "reset":     {"script": [{"reset": true}, {}]},
  "flap":      {"outage": {"first_ms": 60000, "status": 503}},
  "nousage":   {"usage": false},
  "echo-auth": {"faults": [{"p": 1.0, "status": 401, "echo_auth": true}]},
  "done-hang": {"stream": {"hang_after_done": true}},
  "finish-hang": {"stream": {"hang_after_finish": true}},
  "far-retry": {"faults": [{"p": 1.0, "status": 429,
                            "retry_after": "Fri, 31 Dec 9999 23:59:59 GMT"}]},
  "redirect":  {"faults": [{"p": 1.0, "status": 302}]}
}})json";

namespace {

namespace json = boost::json;

// -- validation helpers -------------------------------------------------------

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument(path + ": " + what);
}

const json::object& as_object(const json::value& v, const std::string& path) {
  if (!v.is_object())
    fail(path, "must be an object");
  return v.get_object();
}

void only_fields(const json::object& obj, const std::string& path,
                 std::initializer_list<const char*> allowed) {
  for (auto& kv : obj) {
    bool known = false;
    for (auto* name : allowed)
      if (kv.key() == name)
        known = true;
    if (!known)
      fail(path + "." + std::string(kv.key()), "unknown field");
  }
}

double as_ms(const json::value& v, const std::string& path) {
  if (!v.is_number())
    fail(path, "must be a non-negative number (ms)");
  auto x = v.to_number<double>();
  if (!std::isfinite(x) || x < 0)
    fail(path, "must be a non-negative number (ms)");
  return x;
}

int as_count(const json::value& v, const std::string& path) {
  constexpr int64_t max_count = 1000000;
  int64_t x = -1;
  if (v.is_int64())
    x = v.get_int64();
  else if (v.is_uint64()) // only values beyond INT64_MAX parse as uint64
    x = max_count + 1;
  else if (v.is_double() && std::floor(v.get_double()) == v.get_double()
           && std::fabs(v.get_double()) < 1e12)
    x = static_cast<int64_t>(v.get_double());
  else
    fail(path, "must be a non-negative integer");
  if (x < 0 || x > max_count)
    fail(path, fmt::format("must be an integer in [0, {}]", max_count));
  return static_cast<int>(x);
}

bool as_bool(const json::value& v, const std::string& path) {
  if (!v.is_bool())
    fail(path, "must be true or false");
  return v.get_bool();
}

std::string as_string(const json::value& v, const std::string& path) {
  if (!v.is_string())
    fail(path, "must be a string");
  return std::string(v.get_string());
}

int as_status(const json::value& v, const std::string& path) {
  if (!v.is_int64() || v.get_int64() < 300 || v.get_int64() > 599)
    fail(path, "must be an HTTP status in [300, 599]");
  return static_cast<int>(v.get_int64());
}

/// Header text: a string (verbatim) or a non-negative number.
std::string as_header_text(const json::value& v, const std::string& path) {
  std::string text;
  if (v.is_string()) {
    text = std::string(v.get_string());
  } else if (v.is_int64() && v.get_int64() >= 0) {
    text = std::to_string(v.get_int64());
  } else if (v.is_uint64()) {
    text = std::to_string(v.get_uint64());
  } else if (v.is_double() && std::isfinite(v.get_double())
             && v.get_double() >= 0) {
    text = fmt::format("{}", v.get_double());
  } else {
    fail(path, "must be a string (header text) or a non-negative number");
  }
  for (char c : text)
    if (c == '\r' || c == '\n' || c == '\0')
      fail(path, "must not contain line breaks");
  return text;
}

/// `out = parse(obj[key], path.key)` when `obj` has `key`; untouched
/// otherwise (the field's default stands).
template <class T, class Parse>
void read_field(const json::object& obj, const std::string& path,
                const char* key, T& out, Parse parse) {
  if (auto* x = obj.if_contains(key))
    out = parse(*x, path + "." + key);
}

latency_spec parse_latency(const json::value& v, const std::string& path) {
  auto& obj = as_object(v, path);
  auto* dist = obj.if_contains("dist");
  if (!dist)
    fail(path + ".dist", "required (fixed, lognormal or uniform)");
  if (!dist->is_string())
    fail(path + ".dist", "must be one of fixed, lognormal, uniform");
  auto need = [&](const char* key) -> const json::value& {
    auto* x = obj.if_contains(key);
    if (!x)
      fail(path + "." + key, "required for dist " + std::string(dist->get_string()));
    return *x;
  };
  latency_spec out;
  if (dist->get_string() == "fixed") {
    only_fields(obj, path, {"dist", "ms"});
    out.kind = latency_spec::dist::fixed;
    out.a = as_ms(need("ms"), path + ".ms");
  } else if (dist->get_string() == "lognormal") {
    only_fields(obj, path, {"dist", "median_ms", "sigma"});
    out.kind = latency_spec::dist::lognormal;
    out.a = as_ms(need("median_ms"), path + ".median_ms");
    auto& s = need("sigma");
    if (!s.is_number() || !std::isfinite(s.to_number<double>())
        || s.to_number<double>() < 0)
      fail(path + ".sigma", "must be a non-negative number");
    out.b = s.to_number<double>();
  } else if (dist->get_string() == "uniform") {
    only_fields(obj, path, {"dist", "min_ms", "max_ms"});
    out.kind = latency_spec::dist::uniform;
    out.a = as_ms(need("min_ms"), path + ".min_ms");
    out.b = as_ms(need("max_ms"), path + ".max_ms");
    if (out.b < out.a)
      fail(path + ".max_ms", "must not be less than min_ms");
  } else {
    fail(path + ".dist", "must be one of fixed, lognormal, uniform");
  }
  return out;
}

stream_spec parse_stream(const json::value& v, const std::string& path) {
  auto& obj = as_object(v, path);
  only_fields(obj, path,
              {"cut_after", "stall_after", "stall_ms", "malformed_at",
               "omit_done", "hang_after_done", "hang_after_finish"});
  stream_spec out;
  read_field(obj, path, "cut_after", out.cut_after, as_count);
  read_field(obj, path, "stall_after", out.stall_after, as_count);
  read_field(obj, path, "stall_ms", out.stall_ms, as_ms);
  if (out.stall_after && !obj.contains("stall_ms"))
    fail(path + ".stall_ms", "required with stall_after");
  if (!out.stall_after && obj.contains("stall_ms"))
    fail(path + ".stall_after", "required with stall_ms");
  read_field(obj, path, "malformed_at", out.malformed_at, as_count);
  read_field(obj, path, "omit_done", out.omit_done, as_bool);
  read_field(obj, path, "hang_after_done", out.hang_after_done, as_bool);
  read_field(obj, path, "hang_after_finish", out.hang_after_finish, as_bool);
  return out;
}

/// The fault fields of `obj` (a fault or a script entry).
fault_spec parse_fault_fields(const json::object& obj, const std::string& path,
                              bool require_action) {
  fault_spec f;
  read_field(obj, path, "status", f.status, as_status);
  read_field(obj, path, "code", f.code, as_string);
  read_field(obj, path, "message", f.message, as_string);
  read_field(obj, path, "retry_after", f.retry_after, as_header_text);
  read_field(obj, path, "retry_after_ms", f.retry_after_ms, as_header_text);
  read_field(obj, path, "hang_ms", f.hang_ms, as_ms);
  read_field(obj, path, "reset", f.reset, as_bool);
  read_field(obj, path, "echo_auth", f.echo_auth, as_bool);
  int actions = (f.status != 0) + f.hang_ms.has_value() + f.reset;
  if (actions > 1)
    fail(path, "status, hang_ms and reset exclude each other");
  if (actions == 0 && require_action)
    fail(path, "needs one of status, hang_ms, reset");
  if (f.status == 0)
    for (auto* key :
         {"code", "message", "retry_after", "retry_after_ms", "echo_auth"})
      if (obj.contains(key))
        fail(path + "." + key, "only allowed with status");
  return f;
}

fault_spec parse_fault(const json::value& v, const std::string& path) {
  auto& obj = as_object(v, path);
  only_fields(obj, path,
              {"p", "status", "code", "message", "retry_after",
               "retry_after_ms", "hang_ms", "reset", "content",
               "echo_auth"});
  auto* content = obj.if_contains("content");
  auto f = parse_fault_fields(obj, path, content == nullptr);
  if (content != nullptr) {
    if (f.active())
      fail(path, "content excludes status, hang_ms and reset");
    f.content = as_string(*content, path + ".content");
  }
  if (auto* x = obj.if_contains("p")) {
    if (!x->is_number() || !(x->to_number<double>() >= 0)
        || !(x->to_number<double>() <= 1))
      fail(path + ".p", "must be a number in [0, 1]");
    f.p = x->to_number<double>();
  } else {
    fail(path + ".p", "required (a number in [0, 1])");
  }
  return f;
}

script_entry parse_script_entry(const json::value& v, const std::string& path) {
  auto& obj = as_object(v, path);
  only_fields(obj, path,
              {"tokens", "ttft_ms", "token_ms", "latency", "usage", "stream",
               "status", "code", "message", "retry_after", "retry_after_ms",
               "hang_ms", "reset", "content", "json_content",
               "echo_auth"});
  script_entry e;
  read_field(obj, path, "content", e.content, as_string);
  read_field(obj, path, "json_content", e.json_content, as_string);
  read_field(obj, path, "tokens", e.tokens, as_count);
  read_field(obj, path, "ttft_ms", e.ttft_ms, as_ms);
  read_field(obj, path, "token_ms", e.token_ms, as_ms);
  read_field(obj, path, "latency", e.latency, parse_latency);
  read_field(obj, path, "usage", e.usage, as_bool);
  read_field(obj, path, "stream", e.stream, parse_stream);
  e.fault = parse_fault_fields(obj, path, false);
  return e;
}

model_spec parse_model(const json::value& v, const std::string& path) {
  auto& obj = as_object(v, path);
  only_fields(obj, path,
              {"tokens", "token_bytes", "ttft_ms", "token_ms", "latency",
               "usage", "faults",
               "script", "stream", "outage", "tool_calls", "content",
               "json_content", "reject_formats", "dim", "max_inputs",
               "ocr_fail", "ocr_fail_p"});
  model_spec m;
  read_field(obj, path, "content", m.base.content, as_string);
  read_field(obj, path, "json_content", m.base.json_content, as_string);
  if (auto* x = obj.if_contains("reject_formats")) {
    if (!x->is_array())
      fail(path + ".reject_formats", "must be an array of response_format types");
    auto& arr = x->get_array();
    for (size_t i = 0; i < arr.size(); ++i)
      m.base.reject_formats.push_back(
        as_string(arr[i], fmt::format("{}.reject_formats[{}]", path, i)));
  }
  if (auto* x = obj.if_contains("dim")) {
    m.dim = as_count(*x, path + ".dim");
    if (m.dim < 1 || m.dim > 65536)
      fail(path + ".dim", "must be an integer in [1, 65536]");
  }
  read_field(obj, path, "max_inputs", m.max_inputs, as_count);
  read_field(obj, path, "ocr_fail", m.ocr_fail, as_string);
  if (auto* x = obj.if_contains("ocr_fail_p")) {
    if (!x->is_number() || x->to_number<double>() < 0
        || x->to_number<double>() > 1)
      fail(path + ".ocr_fail_p", "must be a number in [0, 1]");
    m.ocr_fail_p = x->to_number<double>();
  }
  read_field(obj, path, "tokens", m.base.tokens, as_count);
  if (auto* x = obj.if_contains("token_bytes")) {
    m.base.token_bytes = as_count(*x, path + ".token_bytes");
    if (m.base.token_bytes > 65536)
      fail(path + ".token_bytes", "must be an integer in [0, 65536]");
  }
  read_field(obj, path, "ttft_ms", m.base.ttft_ms, as_ms);
  read_field(obj, path, "token_ms", m.base.token_ms, as_ms);
  read_field(obj, path, "latency", m.base.latency, parse_latency);
  read_field(obj, path, "usage", m.base.usage, as_bool);
  read_field(obj, path, "stream", m.base.stream, parse_stream);
  if (auto* x = obj.if_contains("tool_calls")) {
    m.base.tool_calls = as_string(*x, path + ".tool_calls");
    auto& t = m.base.tool_calls;
    if (t != "indexed" && t != "no_index" && t != "index0" && t != "bad_args")
      fail(path + ".tool_calls",
           "must be one of indexed, no_index, index0, bad_args");
  }
  if (auto* x = obj.if_contains("faults")) {
    if (!x->is_array())
      fail(path + ".faults", "must be an array");
    auto& arr = x->get_array();
    for (size_t i = 0; i < arr.size(); ++i)
      m.faults.push_back(
        parse_fault(arr[i], fmt::format("{}.faults[{}]", path, i)));
  }
  if (auto* x = obj.if_contains("script")) {
    if (!x->is_array())
      fail(path + ".script", "must be an array");
    auto& arr = x->get_array();
    if (arr.empty())
      fail(path + ".script", "must not be empty");
    for (size_t i = 0; i < arr.size(); ++i)
      m.script.push_back(
        parse_script_entry(arr[i], fmt::format("{}.script[{}]", path, i)));
  }
  if (auto* x = obj.if_contains("outage")) {
    auto opath = path + ".outage";
    auto& o = as_object(*x, opath);
    only_fields(o, opath, {"first_ms", "status", "retry_after"});
    outage_spec out;
    if (auto* y = o.if_contains("first_ms"))
      out.first_ms = as_ms(*y, opath + ".first_ms");
    else
      fail(opath + ".first_ms", "required");
    if (auto* y = o.if_contains("status"))
      out.status = as_status(*y, opath + ".status");
    if (auto* y = o.if_contains("retry_after"))
      out.retry_after = as_header_text(*y, opath + ".retry_after");
    m.outage = out;
  }
  return m;
}

// -- deterministic randomness -------------------------------------------------

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

double to_unit(uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

double draw_latency(const latency_spec& l, uint64_t seed,
                    const std::string& name, uint64_t n) {
  switch (l.kind) {
    case latency_spec::dist::none:
      return 0;
    case latency_spec::dist::fixed:
      return l.a;
    case latency_spec::dist::uniform:
      return l.a + draw(seed, name, n, 1) * (l.b - l.a);
    case latency_spec::dist::lognormal: {
      // Box-Muller: u1 in (0, 1] keeps the log finite.
      double u1 = 1.0 - draw(seed, name, n, 2);
      double u2 = draw(seed, name, n, 3);
      double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
      return l.a * std::exp(l.b * z);
    }
  }
  return 0;
}

// Words for the answers: plain ASCII, no JSON escaping needed.
const char* const words[] = {
  "alpha",  "bridge", "cedar",  "delta",  "ember",  "falcon", "garnet",
  "harbor", "island", "jasper", "kernel", "lantern", "meadow", "nectar",
  "orbit",  "pepper", "quartz", "river",  "saddle", "timber", "umber",
  "velvet", "willow", "xenon",  "yonder", "zephyr", "amber",  "basil",
  "copper", "dune",   "echo",   "fjord",  "glacier", "hollow", "ivory",
  "juniper", "kiln",  "lagoon", "marble", "north",  "olive",  "prism",
  "quill",  "ridge",  "sierra", "tundra", "upland", "vector", "wander",
  "yarrow", "zenith", "anchor", "beacon", "canyon", "drift",  "fable",
  "grove",  "haven",  "indigo", "jetty",  "karst",  "lumen",  "mosaic",
  "nimbus"};
constexpr size_t word_count = sizeof(words) / sizeof(words[0]);

} // namespace

double draw(uint64_t seed, const std::string& name, uint64_t n,
            uint64_t salt) {
  uint64_t state = seed;
  state = splitmix64(state) ^ fnv1a(name);
  state = splitmix64(state) ^ n;
  state = splitmix64(state) ^ salt;
  return to_unit(splitmix64(state));
}

scenario parse_scenario(const std::string& text) {
  json::value doc;
  try {
    doc = json::parse(text);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("scenario: not valid JSON: ")
                                + e.what());
  }
  if (!doc.is_object())
    fail("scenario", "must be a JSON object {\"models\": {...}}");
  auto& top = doc.get_object();
  only_fields(top, "scenario", {"models"});
  auto* models = top.if_contains("models");
  if (!models)
    fail("models", "required");
  auto& mobj = as_object(*models, "models");
  scenario out;
  for (auto& kv : mobj) {
    std::string name(kv.key());
    if (name.empty())
      fail("models", "a model name must not be empty");
    out[name] = parse_model(kv.value(), "models." + name);
  }
  return out;
}

scenario load_scenario(const std::string& text) {
  auto out = parse_scenario(builtin_scenario_json);
  if (!text.empty())
    for (auto& kv : parse_scenario(text))
      out[kv.first] = kv.second;
  return out;
}

plan decide(const std::string& name, const model_spec& m, uint64_t seed,
            uint64_t n, double since_reset_ms, double time_scale) {
  plan p;
  p.b = m.base;
  const script_entry* entry = nullptr;
  if (!m.script.empty()) {
    entry = &m.script[std::min<uint64_t>(n, m.script.size()) - 1];
    if (entry->tokens)
      p.b.tokens = *entry->tokens;
    if (entry->ttft_ms)
      p.b.ttft_ms = *entry->ttft_ms;
    if (entry->token_ms)
      p.b.token_ms = *entry->token_ms;
    if (entry->latency)
      p.b.latency = *entry->latency;
    if (entry->usage)
      p.b.usage = *entry->usage;
    if (entry->stream)
      p.b.stream = *entry->stream;
    if (entry->content)
      p.b.content = entry->content;
    if (entry->json_content)
      p.b.json_content = entry->json_content;
  }
  p.latency_ms = draw_latency(p.b.latency, seed, name, n);
  if (m.outage && since_reset_ms < m.outage->first_ms * time_scale) {
    p.fault.status = m.outage->status;
    if (m.outage->retry_after)
      p.fault.retry_after = *m.outage->retry_after;
    p.outage = true;
  } else if (entry) {
    p.fault = entry->fault;
  } else {
    for (size_t i = 0; i < m.faults.size(); ++i)
      if (draw(seed, name, n, 100 + i) < m.faults[i].p) {
        p.fault = m.faults[i];
        break;
      }
  }
  if (p.fault.content) {
    // A content fault answers normally, with that text (JSON mode too).
    p.b.content = p.b.json_content = p.fault.content;
    p.fault = fault_spec{};
  }
  return p;
}

std::vector<std::string> answer_tokens(const std::string& model, uint64_t seed,
                                       int count, int token_bytes) {
  std::vector<std::string> out;
  uint64_t state = seed;
  state = splitmix64(state) ^ fnv1a(model);
  for (int i = 0; i < count; ++i) {
    std::string w = words[splitmix64(state) % word_count];
    std::string token = i == 0 ? w : " " + w;
    while (token.size() < static_cast<size_t>(token_bytes))
      token += w;
    out.push_back(std::move(token));
  }
  return out;
}

} // namespace pgw::sim::detail

namespace pgw::sim {

void check_scenario(const std::string& scenario_json) {
  detail::parse_scenario(scenario_json);
}

std::string answer_text(const std::string& model, uint64_t seed, int tokens,
                        int token_bytes) {
  std::string out;
  for (auto& t : detail::answer_tokens(model, seed, tokens, token_bytes))
    out += t;
  return out;
}

} // namespace pgw::sim
