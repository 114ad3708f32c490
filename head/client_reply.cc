#include "head/client_reply.h"

namespace ztune::head {

void SetReplyRid(Json& reply, const Json& rid) {
  if (rid.is_null()) {
    reply.erase("rid");
  } else {
    reply["rid"] = rid;
  }
}

Json ClientErrorReply(const Json& rid, const Status& status) {
  Json reply{{"ok", false},
             {"error", {{"code", StatusCodeName(status.code())}, {"message", status.message()}}}};
  SetReplyRid(reply, rid);
  return reply;
}

}  // namespace ztune::head
