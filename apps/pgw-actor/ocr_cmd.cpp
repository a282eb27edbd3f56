// `pgw-actor ocr`: one OCR call on an image file, the text on stdout.

#include "cli.hpp"

#include "actors/client.hpp"
#include "apps/node/node_builder.hpp"
#include "config/file.hpp"
#include "config/json_text.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include <boost/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <algorithm>

namespace pgw::cli {

namespace {

namespace json = boost::json;

constexpr const char* ocr_usage = R"(usage: pgw-actor ocr text|layout FILE [options]

  text              the text in the image
  layout            markdown plus blocks (type, text, bounding box)
  FILE              a PNG, JPEG or PDF (the type is read from its bytes)
  --scope S         scope to use (default OCR; KIND=ocr_vision or ocr_monkey)
  --env-file F      read configuration from F (default ./.env when present)
  --deadline S      bound the whole call to S seconds (finite, > 0)
  --json            print {text, blocks?, source, call_id, call_stats} or
                    the error as JSON
exit codes: 0 ok, 2 usage/config, 3 rejected, 4 gateway unavailable,
            5 deadline exceeded, 6 governance backend unavailable, 1 other
)";

int ocr_usage_error(const std::string& msg) {
  std::fprintf(stderr, "pgw-actor ocr: %s\n", msg.c_str());
  return exit_usage;
}

std::string ocr_json(const ocr_response& resp, bool layout) {
  json::object out{{"text", resp.text},
                   {"source", resp.source},
                   {"model", resp.model},
                   {"call_id", resp.call_id},
                   {"call_stats", json::parse(call_stats_json(resp.stats))}};
  if (layout)
    out["blocks"] = json::parse(resp.blocks_json.empty() ? "[]"
                                                         : resp.blocks_json);
  return json_text(out);
}

} // namespace

int ocr_main(const std::vector<std::string>& args) {
  std::optional<std::string> operation, file, env_file;
  std::string scope = "OCR";
  bool json_out = false;
  ocr_request req;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(ocr_usage, stdout);
      return exit_ok;
    } else if (a == "--json") {
      json_out = true;
    } else if (a == "--scope" || a == "--env-file" || a == "--deadline") {
      if (i + 1 >= args.size())
        return ocr_usage_error(a + " needs a value");
      auto& v = args[++i];
      if (a == "--scope") {
        scope = v;
      } else if (a == "--env-file") {
        env_file = v;
      } else {
        auto x = parse_number(v);
        if (!x || *x <= 0)
          return ocr_usage_error("--deadline " + v
                                 + ": must be a finite number of seconds > 0");
        req.deadline_s = *x;
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return ocr_usage_error("unknown option " + a);
    } else if (!operation) {
      if (a != "text" && a != "layout")
        return ocr_usage_error("the operation is text or layout, not " + a);
      operation = a;
    } else if (!file) {
      file = a;
    } else {
      return ocr_usage_error("more than one file given");
    }
  }
  if (!operation || !file)
    return ocr_usage_error("usage: pgw-actor ocr text|layout FILE");
  req.layout = *operation == "layout";
  auto cfg = load(env_file);
  if (!cfg)
    return exit_usage;
  // Bounded: a regular file of at most the scope's largest MAX_IMAGE_BYTES,
  // never /dev/zero or a FIFO.
  int64_t cap = 0;
  if (auto* sc = cfg->find(scope))
    for (auto& src : sc->sources)
      cap = std::max(cap, src.max_image_bytes);
  auto image = read_config_file(
    *file, "image file " + *file + " (MAX_IMAGE_BYTES=" + std::to_string(cap) + ")",
    static_cast<size_t>(cap));
  if (!image)
    return ocr_usage_error(describe(image.error()));
  req.image = std::move(*image);
  system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto gw = command_gateway(sys, *cfg, scope, json_out);
  if (!gw)
    return exit_usage;
  client cl{sys, *gw};
  req.call_id = "cli-ocr-" + std::to_string(::getpid());
  auto call_id = req.call_id;
  bool layout = req.layout;
  auto pending = cl.ocr_async(std::move(req));
  auto result = await_cancellable(pending, [&] { cl.cancel(call_id); });
  int rc = exit_ok;
  if (result) {
    if (json_out)
      std::puts(ocr_json(*result, layout).c_str());
    else
      std::puts(result->text.c_str());
  } else {
    rc = report_call_error(result.error(), json_out);
  }
  std::fflush(stdout);
  caf::anon_send_exit(*gw, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace pgw::cli
