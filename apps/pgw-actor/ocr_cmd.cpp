// `pgw-actor ocr`: one OCR call on an image file, the text on stdout.

#include "side_cmd.hpp"

#include "apps/node/node_builder.hpp"
#include "config/file.hpp"
#include "config/json_text.hpp"

#include <boost/json.hpp>

#include <cstdio>
#include <algorithm>

namespace pgw::cli {

namespace {

namespace json = boost::json;

constexpr const char* ocr_usage = R"(usage: pgw-actor ocr text|layout FILE [options]

  text              the text in the image
  layout            markdown plus blocks (type, text, bounding box)
  FILE              a PNG, JPEG or PDF (the type is read from its bytes)
  --scope S         scope to use (default OCR; KIND=ocr_vision or ocr_monkey);
                    S/NAME pins source NAME of the scope
  --source NAME     pin the call to source NAME
  --env-file F      read configuration from F (default ./.env when present)
  --deadline S      bound the whole call to S seconds (finite, > 0)
  --json            print {text, blocks?, source, call_id, call_stats} or
                    the error as JSON
exit codes: 0 ok, 2 usage/config, 3 rejected, 4 gateway unavailable,
            5 deadline exceeded, 6 governance backend unavailable, 1 other
)";


std::string ocr_json(const ocr_response& resp, bool layout) {
  json::object out{{"text", resp.text},
                   {"source", resp.source},
                   {"model", resp.model},
                   {"call_id", resp.call_id},
                   {"call_stats", json::parse(call_stats_json(resp.stats))}};
  if (layout) {
    // Read back as written: coordinates keep their values.
    json::error_code ec;
    auto blocks = parse_json(resp.blocks_json, ec);
    out["blocks"] = ec ? json::value(json::array{}) : std::move(blocks);
  }
  return json_text(out);
}

} // namespace

int ocr_main(const std::vector<std::string>& args) {
  auto ocr_usage_error = [json = wants_json(args)](const std::string& msg) {
    return usage_failure(msg, json);
  };
  std::optional<std::string> operation, file;
  side_options opts;
  opts.scope = "OCR";
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    std::string error;
    auto shared = read_side_option(args, i, opts, error);
    if (shared == side_option::help) {
      std::fputs(ocr_usage, stdout);
      return exit_ok;
    } else if (!error.empty()) {
      return ocr_usage_error(error);
    } else if (shared == side_option::taken) {
      continue;
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
  ocr_request req;
  req.layout = *operation == "layout";
  auto cfg = load(opts.env_file, opts.json_out);
  if (!cfg)
    return exit_usage;
  // The image's size cap comes from the scope's sources: an unknown scope
  // or pinned source is named first, as the gateway would name it (else
  // a cap of 0 blamed the image).
  if (auto err = check_scope(*cfg, opts.scope))
    return report_call_error(err, opts.json_out);
  auto& scope = *cfg->find(opts.scope);
  if (!opts.source.empty() && scope.find(opts.source) == nullptr)
    return report_call_error(make_error(error_code::invalid_request,
                                        scope.unknown_source(opts.source)),
                             opts.json_out);
  // Bounded: a regular file of at most the scope's largest MAX_IMAGE_BYTES,
  // never /dev/zero or a FIFO.
  int64_t cap = 0;
  for (auto& src : scope.sources)
    if (opts.source.empty() || src.name == opts.source)
      cap = std::max(cap, src.max_image_bytes);
  auto image = read_config_file(
    *file, "image file " + *file + " (MAX_IMAGE_BYTES=" + std::to_string(cap) + ")",
    static_cast<size_t>(cap));
  if (!image) // the caller's file, not configuration: invalid_request
    return ocr_usage_error(words_of(image.error()));
  req.image = std::move(*image);
  bool layout = req.layout;
  return run_side_command(
    *cfg, opts, std::move(req), "cli-ocr-",
    [](client& cl, ocr_request r) { return cl.ocr_async(std::move(r)); },
    [&opts, layout](const ocr_response& result) {
      if (opts.json_out)
        std::puts(ocr_json(result, layout).c_str());
      else
        std::puts(result.text.c_str());
    });
}

} // namespace pgw::cli
