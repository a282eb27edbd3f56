#pragma once

/// The gateway's `embed` handler (issue 16). Internal to the gateway.

#include "actors/admission.hpp"

namespace pgw::detail {

/// Checks the request, answers an empty input list at once (no admission,
/// no deadline), otherwise spawns an `embed_call` and answers with its
/// result. `invalid_request` for a scope whose sources are not
/// KIND=embedding, an empty input text, or a deadline that is not finite
/// and positive.
caf::result<embed_response> start_embed(gateway_self self,
                                        embed_request req);

} // namespace pgw::detail
