#include "side_cmd.hpp"

#include "config/keys.hpp"

namespace pgw::cli {

side_option read_side_option(const std::vector<std::string>& args, size_t& i,
                             side_options& opts, std::string& error) {
  auto& a = args[i];
  if (a == "--help" || a == "-h")
    return side_option::help;
  if (a == "--json") {
    opts.json_out = true;
    return side_option::taken;
  }
  if (a != "--scope" && a != "--source" && a != "--env-file"
      && a != "--deadline")
    return side_option::not_shared;
  if (i + 1 >= args.size()) {
    error = a + " needs a value";
    return side_option::taken;
  }
  auto& v = args[++i];
  if (a == "--scope" || a == "--source") {
    // Source names are lower case (config/load.cpp), as serve's model.
    auto slash = a == "--scope" ? v.find('/') : std::string::npos;
    opts.scope = a == "--scope" ? v.substr(0, slash) : opts.scope;
    auto pin = a == "--source" ? v
               : slash == std::string::npos ? std::string{}
                                            : v.substr(slash + 1);
    pin = detail::to_lower(pin);
    if (a == "--source" && pin.empty())
      error = "--source needs a source name";
    else if (!pin.empty() && !opts.source.empty() && pin != opts.source)
      error = "two different sources pinned: " + opts.source + " and " + pin;
    else if (!pin.empty())
      opts.source = pin;
  } else if (a == "--env-file") {
    opts.env_file = v;
  } else {
    auto x = parse_number(v);
    if (!x || *x <= 0)
      error = "--deadline " + v
              + ": must be a finite decimal number of seconds > 0";
    else
      opts.deadline_s = *x;
  }
  return side_option::taken;
}

} // namespace pgw::cli
