#pragma once

/// The gateway's `ocr` handler (issue 16). Internal to the gateway.

#include "actors/admission.hpp"

namespace pgw::detail {

/// Checks the request (`invalid_request` for a scope whose sources are not
/// KIND=ocr_vision or ocr_monkey, an image that is empty, larger than the
/// smallest MAX_IMAGE_BYTES of the scope or not a PNG/JPEG/PDF by its
/// bytes, a bad deadline) before any admission, then spawns an `ocr_call`
/// and answers with its result.
caf::result<ocr_response> start_ocr(gateway_self self, ocr_request req);

} // namespace pgw::detail
