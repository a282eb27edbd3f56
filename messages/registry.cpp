#include "messages/registry.hpp"

#include "messages/cache.hpp"
#include "messages/chat.hpp"
#include "messages/embed.hpp"
#include "messages/ocr.hpp"
#include "messages/errors.hpp"
#include "messages/gateway.hpp"
#include "messages/governance.hpp"
#include "messages/outcome.hpp"
#include "messages/stream.hpp"
#include "messages/telemetry.hpp"

namespace pgw {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::pgw>();
  cfg.add_error_category(
    caf::atom("pgw"),
    [](uint8_t code, caf::atom_value, const caf::message& ctx) {
      std::string out = "pgw.";
      out += to_string(static_cast<error_code>(code));
      if (ctx.size() == 1 && ctx.match_element<error_detail>(0)) {
        auto& detail = ctx.get_as<error_detail>(0);
        if (!detail.message.empty()) {
          out += ": ";
          out += detail.message;
        }
      }
      return out;
    });
}

} // namespace pgw
