// The envelope of a reply to a client (docs/client-protocol.md): the
// request's "rid" (absent when the request had none, so that the client
// takes a rid-less error as the answer to what it could not send whole), and
// for a refusal "ok": false with the error's code and message. Pure
// functions; any thread.
#pragma once

#include <string>

#include "common/json.h"
#include "common/status.h"

namespace ztune::head {

// Sets reply["rid"] to `rid`, or removes it when `rid` is null.
void SetReplyRid(Json& reply, const Json& rid);

// {"rid", "ok": false, "error": {"code", "message"}}; no "rid" when null.
Json ClientErrorReply(const Json& rid, const Status& status);

// A document field that is null rather than "" when there is nothing to say.
inline Json NullIfEmpty(const std::string& s) { return s.empty() ? Json() : Json(s); }

}  // namespace ztune::head
