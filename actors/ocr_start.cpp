#include "actors/ocr_start.hpp"

#include "actors/ocr_call.hpp"
#include "actors/side_start.hpp"

#include <limits>

namespace pgw::detail {

caf::result<ocr_response> start_ocr(gateway_self self, ocr_request req) {
  auto& st = self->state;
  auto kind = st.scope->sources.front().kind;
  if (!is_ocr(kind))
    return make_error(error_code::invalid_request,
                      "scope " + st.scope->name + " serves KIND="
                        + to_string(kind)
                        + ", not OCR");
  if (auto err = check_pin(self, req.source))
    return err;
  // Any source may take the image, unless the call is pinned to one.
  auto max_bytes = std::numeric_limits<int64_t>::max();
  for (auto& src : st.scope->sources)
    if (req.source.empty() || src.name == req.source)
      max_bytes = std::min(max_bytes, src.max_image_bytes);
  image_type type;
  if (auto err = check_image(req.image, static_cast<size_t>(max_bytes), type))
    return err;
  if (auto err = check_deadline(req.deadline_s))
    return err;
  if (auto err = claim_call_id(self, req.call_id))
    return err;
  ocr_call_args args;
  fill_side_args(self, args, req.call_id, req.deadline_s, req.source);
  args.type = type;
  args.pages = page_count(req.image, type);
  args.request = std::make_shared<const ocr_request>(std::move(req));
  auto id = args.call_id;
  return run_side_call<ocr_response>(self, id,
                                     self->spawn(ocr_call, std::move(args)));
}

} // namespace pgw::detail
