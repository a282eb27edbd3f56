// `pgw-actor soak --scenario NAME`: one file (config/scenarios/NAME.json)
// carries the simulator's behaviours, the scope configuration, the load and
// the pass criteria. The simulator runs in this process; settings come from
// the file's "env" only; the load runs through the soak runner; then every
// expectation is checked against the soak's figures, the gateway's status
// and the simulator's request log, and the run fails (exit 1) naming each
// expectation that does not hold. Format: config/scenarios/README.md.

#include "apps/harness/scenario_runner.hpp"

#include "config/file.hpp"
#include "config/json_text.hpp"
#include "apps/harness/scenario_checks.hpp"

#include "apps/pgw-upstream-sim/scenario.hpp"
#include "apps/pgw-upstream-sim/sim.hpp"
#include "actors/structured_schema.hpp"
#include "apps/pgw-upstream-sim/embeddings.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

namespace pgw::cli {

namespace json = boost::json;
namespace fs = std::filesystem;

// -- finding the file ---------------------------------------------------------------

namespace {

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

/// The source tree this executable was built from: a parent directory of the
/// executable holding config/scenarios/, else the CMakeCache.txt beside it
/// naming the source directory.
std::vector<fs::path> source_trees() {
  std::vector<fs::path> out;
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    return out;
  for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (fs::is_directory(dir / "config" / "scenarios", ec))
      out.push_back(dir);
    if (dir == dir.root_path())
      break;
  }
  std::ifstream cache{exe.parent_path() / "CMakeCache.txt"};
  std::string line;
  const std::string key = "CMAKE_HOME_DIRECTORY:INTERNAL=";
  while (std::getline(cache, line))
    if (line.rfind(key, 0) == 0)
      out.emplace_back(line.substr(key.size()));
  return out;
}

} // namespace

std::string resolve_scenario(const std::string& name,
                             std::vector<std::string>* tried) {
  std::vector<fs::path> candidates{fs::path(name)};
  auto file = name + ".json";
  bool plain_name = name.find('/') == std::string::npos;
  if (plain_name) {
    candidates.push_back(fs::path("config") / "scenarios" / file);
    for (auto& tree : source_trees())
      candidates.push_back(tree / "config" / "scenarios" / file);
  }
  for (auto& c : candidates) {
    if (tried)
      tried->push_back(c.string());
    if (is_file(c))
      return c.string();
  }
  return {};
}

// -- the file ---------------------------------------------------------------------

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::invalid_argument(where + ": " + what);
}

void only_keys(const json::object& o, const std::string& where,
               std::initializer_list<const char*> keys) {
  for (auto& kv : o) {
    if (!kv.key().empty() && kv.key()[0] == '_') // _comment and friends
      continue;
    bool known = false;
    for (auto* k : keys)
      known = known || kv.key() == k;
    if (!known)
      bad(where + "." + std::string(kv.key()), "unknown key");
  }
}

double number(const json::value& v, const std::string& where) {
  if (!v.is_number())
    bad(where, "must be a number");
  auto x = v.to_number<double>();
  if (!std::isfinite(x))
    bad(where, "must be a finite number");
  return x;
}

int64_t count(const json::value& v, const std::string& where, int64_t min) {
  auto x = number(v, where);
  if (x != std::floor(x) || x < static_cast<double>(min) || x > 1e9)
    bad(where, fmt::format("must be an integer >= {}", min));
  return static_cast<int64_t>(x);
}

std::string text_of(const json::value& v, const std::string& where) {
  if (v.is_string())
    return std::string(v.get_string());
  if (v.is_int64())
    return std::to_string(v.get_int64());
  if (v.is_double())
    return fmt::format("{}", v.get_double());
  if (v.is_bool())
    return v.get_bool() ? "true" : "false";
  bad(where, "must be a string, a number or a boolean");
}

/// A scenario file: a regular file of at most 1 MiB (a FIFO would block,
/// a device never end).
std::string read_text(const std::string& path) {
  auto text = read_config_file(path, "scenario file " + path);
  if (!text)
    throw std::runtime_error(words_of(text.error()));
  return std::move(*text);
}

scenario_file parse_file(const std::string& path) {
  scenario_file f;
  f.path = path;
  f.name = fs::path(path).stem().string();
  json::value doc;
  try {
    doc = json::parse(read_text(path));
  } catch (const std::exception& e) {
    bad(path, std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object())
    bad(path, "must be a JSON object");
  auto& top = doc.get_object();
  only_keys(top, "scenario",
            {"description", "sim", "scope", "env", "load", "expect", "prices",
             "fleet"});
  if (auto* d = top.if_contains("description"))
    f.description = text_of(*d, "description");
  // -- sim --
  auto* sim = top.if_contains("sim");
  if (!sim || !sim->is_object())
    bad("sim", "required: {\"models\": {...}, \"seed\": N, \"time_scale\": X}");
  auto& so = sim->get_object();
  only_keys(so, "sim", {"models", "seed", "time_scale"});
  auto* models = so.if_contains("models");
  if (!models || !models->is_object())
    bad("sim.models", "required: the SPEC §11.1 models object");
  f.models_json = json_text(json::object{{"models", *models}});
  try {
    f.models = sim::detail::load_scenario(f.models_json);
  } catch (const std::invalid_argument& e) {
    bad("sim", e.what());
  }
  if (auto* x = so.if_contains("seed"))
    f.seed = static_cast<uint64_t>(count(*x, "sim.seed", 0));
  if (auto* x = so.if_contains("time_scale")) {
    f.time_scale = number(*x, "sim.time_scale");
    if (f.time_scale < 0)
      bad("sim.time_scale", "must be >= 0");
  }
  // -- scope and env --
  if (auto* x = top.if_contains("scope"))
    f.scope = text_of(*x, "scope");
  auto* env = top.if_contains("env");
  if (!env || !env->is_object())
    bad("env", "required: {\"KEY\": \"value\", ...} (${SIM} is the "
               "simulator's base URL)");
  for (auto& kv : env->get_object())
    f.env[std::string(kv.key())]
      = text_of(kv.value(), "env." + std::string(kv.key()));
  // -- load --
  auto* load = top.if_contains("load");
  if (!load || !load->is_object())
    bad("load", "required: {\"calls\": N, \"concurrency\": C}");
  auto& lo = load->get_object();
  only_keys(lo, "load",
            {"calls", "concurrency", "deadline_s", "stream", "schema",
             "operation", "inputs"});
  if (auto* x = lo.if_contains("operation")) {
    f.operation = text_of(*x, "load.operation");
    if (f.operation != "chat" && f.operation != "embeddings"
        && f.operation != "ocr_text" && f.operation != "ocr_layout")
      bad("load.operation", "must be chat, embeddings, ocr_text or "
                            "ocr_layout");
  }
  if (auto* x = lo.if_contains("inputs")) {
    if (f.operation != "embeddings")
      bad("load.inputs", "only with \"operation\": \"embeddings\"");
    f.inputs = count(*x, "load.inputs", 1);
  }
  if (auto* x = lo.if_contains("schema")) {
    if (!x->is_object())
      bad("load.schema", "must be a JSON Schema object");
    f.schema = json::serialize(*x);
  }
  if (auto* x = lo.if_contains("calls"))
    f.calls = f.file_calls = count(*x, "load.calls", 1);
  if (auto* x = lo.if_contains("concurrency")) {
    f.concurrency = static_cast<int>(count(*x, "load.concurrency", 1));
    if (f.concurrency > 10000)
      bad("load.concurrency", "must be <= 10000");
  }
  if (auto* x = lo.if_contains("deadline_s")) {
    f.deadline_s = number(*x, "load.deadline_s");
    if (*f.deadline_s <= 0)
      bad("load.deadline_s", "must be > 0");
  }
  if (auto* x = lo.if_contains("stream")) {
    if (!x->is_bool())
      bad("load.stream", "must be true or false");
    f.stream = x->get_bool();
  }
  // -- prices --
  if (auto* x = top.if_contains("prices")) {
    if (!x->is_object())
      bad("prices", "must be a price table (the config/prices.json format)");
    f.prices_json = json_text(*x);
  }
  // -- fleet --
  if (auto* x = top.if_contains("fleet")) {
    if (!x->is_object())
      bad("fleet", "must be {\"nodes\": N}");
    auto& fo = x->get_object();
    only_keys(fo, "fleet", {"nodes"});
    f.nodes = 3;
    if (auto* n = fo.if_contains("nodes"))
      f.nodes = static_cast<int>(count(*n, "fleet.nodes", 1));
    if (f.nodes > 32)
      bad("fleet.nodes", "must be <= 32");
  }
  // -- expect --
  if (auto* x = top.if_contains("expect")) {
    if (!x->is_object())
      bad("expect", "must be an object");
    f.expect = x->get_object();
    check_expectation_keys(f.expect, f.nodes > 0);
  }
  if (f.nodes > 0 && f.operation != "chat")
    bad("load.operation", "a fleet runs chat calls only");
  return f;
}

/// A temporary file that goes away with the run.
struct temp_file {
  std::string path;

  explicit temp_file(const std::string& text) {
    char name[] = "/tmp/pgw-scenario-XXXXXX";
    int fd = ::mkstemp(name);
    if (fd < 0)
      throw std::runtime_error("cannot create a temporary file");
    path = name;
    auto rc = ::write(fd, text.data(), text.size());
    ::close(fd);
    if (rc != static_cast<ssize_t>(text.size()))
      throw std::runtime_error("cannot write " + path);
  }

  ~temp_file() {
    ::unlink(path.c_str());
  }
};

/// Embeddings: each answer's vector i must be the simulator's vector of
/// input i (a hash of its text), so any reordering or mix-up shows.
class embed_order_checker {
public:
  void operator()(const std::vector<std::string>& inputs,
                  const embed_response& r) {
    int64_t wrong = 0;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (i >= r.vectors.size()
          || r.vectors[i]
               != sim::detail::embed_vector(inputs[i], r.vectors[i].size()))
        ++wrong;
    std::lock_guard<std::mutex> guard{mtx_};
    checked_ += static_cast<int64_t>(inputs.size());
    wrong_ += wrong;
  }

  void fill(check_context& ctx) {
    std::lock_guard<std::mutex> guard{mtx_};
    ctx.vectors_checked = checked_;
    ctx.vectors_wrong = wrong_;
  }

private:
  std::mutex mtx_;
  int64_t checked_ = 0;
  int64_t wrong_ = 0;
};

/// Checks a complete answer: the simulator's deterministic text for the
/// answering source's model, with a finish_reason.
class answer_checker {
public:
  answer_checker(const scenario_file& f, const scope_config& scope)
    : seed_(f.seed) {
    for (auto& s : scope.sources) {
      model_of_[s.name] = s.model;
      auto it = f.models.find(s.model);
      if (it == f.models.end())
        continue;
      std::set<int> counts{it->second.base.tokens};
      for (auto& e : it->second.script)
        if (e.tokens)
          counts.insert(*e.tokens);
      for (int n : counts)
        expected_[s.model].insert(sim::answer_text(s.model, seed_, n));
    }
  }

  void operator()(int64_t call, const caf::expected<chat_response>& res) {
    if (!res)
      return;
    auto m = model_of_.find(res->source);
    bool complete = false;
    std::string why;
    if (m == model_of_.end() || !expected_.count(m->second)) {
      why = "no expected text for source " + res->source;
    } else if (res->finish_reason.empty()) {
      why = "no finish_reason";
    } else if (!expected_[m->second].count(res->content)) {
      why = fmt::format("content of {} chars is not the model's answer",
                        res->content.size());
    } else {
      complete = true;
    }
    std::lock_guard<std::mutex> guard{mtx_};
    ++checked_;
    if (!complete) {
      ++truncated_;
      if (examples_.size() < 5)
        examples_.push_back(fmt::format("call {} from {}: {} ({:?})", call,
                                        res->source, why,
                                        res->content.substr(0, 60)));
    }
  }

  int64_t checked() const {
    return checked_;
  }
  int64_t truncated() const {
    return truncated_;
  }
  const std::vector<std::string>& examples() const {
    return examples_;
  }

private:
  uint64_t seed_;
  std::map<std::string, std::string> model_of_;
  std::map<std::string, std::set<std::string>> expected_;
  std::mutex mtx_;
  int64_t checked_ = 0;
  int64_t truncated_ = 0;
  std::vector<std::string> examples_;
};

/// Structured output: checks every answer's `parsed` value against the
/// load's schema on its own (not trusting the gateway's verdict) and sums
/// re-asks and repairs.
class structured_tally {
public:
  explicit structured_tally(const std::string& schema) {
    if (!schema.empty())
      if (auto s = compile_schema(schema))
        schema_ = *s;
  }

  void operator()(const caf::expected<chat_response>& res) {
    if (!schema_ || !res)
      return;
    bool valid = check_answer(*schema_, res->parsed).valid;
    std::lock_guard<std::mutex> guard{mtx_};
    valid_ += valid ? 1 : 0;
    reasks_ += res->stats.reasks;
    reasked_ += res->stats.reasks > 0 ? 1 : 0;
    repaired_ += res->stats.repaired ? 1 : 0;
  }

  void fill(check_context& ctx) {
    std::lock_guard<std::mutex> guard{mtx_};
    ctx.schema_valid = valid_;
    ctx.reasks = reasks_;
    ctx.reasked_calls = reasked_;
    ctx.repaired = repaired_;
  }

private:
  schema_ptr schema_;
  std::mutex mtx_;
  int64_t valid_ = 0;
  int64_t reasks_ = 0;
  int64_t reasked_ = 0;
  int64_t repaired_ = 0;
};

/// The expectations that look at when calls started (success_rate_until,
/// share_after), counted as the answers come: nothing kept per call.
class timeline_tally {
public:
  explicit timeline_tally(const json::object& expect) {
    if (auto* x = expect.if_contains("success_rate_until"))
      until_s_ = x->at("until_s").to_number<double>();
    if (auto* x = expect.if_contains("share_after")) {
      after_s_ = x->at("after_s").to_number<double>();
      after_source_ = std::string(x->at("source").as_string());
    }
  }

  void operator()(double start_s, const caf::expected<chat_response>& res) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (until_s_ && start_s < *until_s_) {
      ++until_calls_;
      until_ok_ += res ? 1 : 0;
    }
    if (after_s_ && start_s >= *after_s_ && res) {
      ++after_ok_;
      after_on_ += res->source == after_source_ ? 1 : 0;
    }
  }

  void fill(check_context& ctx) {
    std::lock_guard<std::mutex> guard{mtx_};
    ctx.until_calls = until_calls_;
    ctx.until_ok = until_ok_;
    ctx.after_ok = after_ok_;
    ctx.after_on = after_on_;
  }

private:
  std::optional<double> until_s_, after_s_;
  std::string after_source_;
  std::mutex mtx_;
  int64_t until_calls_ = 0, until_ok_ = 0, after_ok_ = 0, after_on_ = 0;
};

} // namespace

// -- the command --------------------------------------------------------------------

int scenario_main(const std::string& name, const scenario_overrides& ov) {
  std::vector<std::string> tried;
  auto path = resolve_scenario(name, &tried);
  if (path.empty()) {
    std::fprintf(stderr, "pgw-actor soak: no scenario '%s'; looked at:\n",
                 name.c_str());
    for (auto& t : tried)
      std::fprintf(stderr, "  %s\n", t.c_str());
    return exit_usage;
  }
  scenario_file f;
  try {
    f = parse_file(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pgw-actor soak: scenario %s: %s\n", path.c_str(),
                 e.what());
    return exit_usage;
  }
  if (ov.calls)
    f.calls = *ov.calls;
  if (ov.concurrency)
    f.concurrency = *ov.concurrency;
  if (f.nodes > 0)
    return run_fleet(f, ov);

  auto upstream = start_scenario_sim(f);
  if (!upstream)
    return exit_other;
  auto base = fmt::format("http://127.0.0.1:{}/v1", upstream->port());
  env_map env;
  for (auto& [k, v] : f.env)
    env[k] = replace_all(v, "${SIM}", base);
  std::unique_ptr<temp_file> prices;
  if (!f.prices_json.empty() && !env.count("PGW_PRICING_PATH")) {
    prices = std::make_unique<temp_file>(f.prices_json);
    env["PGW_PRICING_PATH"] = prices->path;
  }
  for (auto& [k, v] : ov.set)
    env[k] = replace_all(v, "${SIM}", base);
  auto cfg = load_settings(env);
  if (!cfg) {
    std::fprintf(stderr, "pgw-actor soak: scenario %s: %s\n", path.c_str(),
                 describe(cfg.error()).c_str());
    return exit_usage;
  }
  for (auto& w : cfg->warnings)
    std::fprintf(stderr, "pgw-actor: warning: %s\n", w.c_str());
  auto* scope = cfg->find(f.scope);
  if (!scope) {
    std::fprintf(stderr, "pgw-actor soak: scenario %s: no scope %s in its "
                         "env\n",
                 path.c_str(), f.scope.c_str());
    return exit_usage;
  }

  std::printf("scenario %s (%s)\n", f.name.c_str(), path.c_str());
  if (!f.description.empty())
    std::printf("  %s\n", f.description.c_str());
  std::printf("  simulator on %s, seed %llu, time scale %g; %lld calls, "
              "concurrency %d%s%s\n\n",
              base.c_str(), static_cast<unsigned long long>(f.seed),
              f.time_scale, static_cast<long long>(f.calls), f.concurrency,
              f.deadline_s ? fmt::format(", deadline {} s", *f.deadline_s).c_str()
                           : "",
              f.stream ? (*f.stream ? ", streaming" : ", not streaming") : "");
  std::fflush(stdout);

  soak_params params;
  params.calls = f.calls;
  params.concurrency = f.concurrency;
  params.scope = f.scope;
  if (f.stream)
    params.stream = *f.stream;
  if (f.deadline_s)
    params.deadline_s = *f.deadline_s;
  params.publish = ov.publish;
  params.title = "scenario " + f.name;
  params.schema = f.schema;
  params.operation = f.operation;
  params.inputs = f.inputs;
  auto vectors = std::make_shared<embed_order_checker>();
  if (f.operation == "embeddings")
    params.embed_hook = [vectors](int64_t,
                                  const std::vector<std::string>& inputs,
                                  const embed_response& r) {
      (*vectors)(inputs, r);
    };
  auto checker = std::make_shared<answer_checker>(f, *scope);
  auto structured = std::make_shared<structured_tally>(f.schema);
  auto timeline = std::make_shared<timeline_tally>(f.expect);
  answer_hook hook = [checker, structured,
                      timeline](int64_t n, double start_s,
                                const caf::expected<chat_response>& r) {
    (*checker)(n, r);
    (*structured)(r);
    (*timeline)(start_s, r);
  };
  // Outage windows and the log start with the load.
  upstream->reset();
  soak_result res;
  auto rc = run_soak(*cfg, params, &res, hook);
  if (rc == exit_usage)
    return rc;
  auto log = parse_sim_log(upstream->log_json());
  upstream->stop();

  check_context ctx{f, *scope, res, log, checker->checked(),
                    checker->truncated(), checker->examples()};
  structured->fill(ctx);
  vectors->fill(ctx);
  timeline->fill(ctx);
  auto checks = evaluate(ctx);
  bool soak_ok = rc == exit_ok;
  bool all = soak_ok && print_checks(f, ctx, checks);
  if (ov.json_path) {
    auto doc = res.report;
    doc["scenario"] = checks_json(f, ctx, checks, all);
    if (write_json_report(*ov.json_path, doc) != exit_ok)
      return exit_other;
  }
  return all ? exit_ok : exit_other;
}

std::string replace_all(std::string s, const std::string& from,
                        const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos;
       at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::unique_ptr<sim::server> start_scenario_sim(const scenario_file& f) {
  sim::options sim_opts;
  sim_opts.seed = f.seed;
  sim_opts.time_scale = f.time_scale;
  sim_opts.scenario_json = f.models_json;
  try {
    return std::make_unique<sim::server>(sim_opts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pgw-actor soak: simulator: %s\n", e.what());
    return nullptr;
  }
}

} // namespace pgw::cli
