#include "side_cmd.hpp"

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
  if (a != "--scope" && a != "--env-file" && a != "--deadline")
    return side_option::not_shared;
  if (i + 1 >= args.size()) {
    error = a + " needs a value";
    return side_option::taken;
  }
  auto& v = args[++i];
  if (a == "--scope") {
    opts.scope = v;
  } else if (a == "--env-file") {
    opts.env_file = v;
  } else {
    auto x = parse_number(v);
    if (!x || *x <= 0)
      error = "--deadline " + v + ": must be a finite number of seconds > 0";
    else
      opts.deadline_s = *x;
  }
  return side_option::taken;
}

} // namespace pgw::cli
