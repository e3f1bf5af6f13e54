// The request header that names the session a call is about, for a gateway in front of several
// replicas to route by (deploy/gateway/haproxy.cfg sticks each value to the replica that
// answered it). Clients send it with every call that names an existing session (a resumed
// Stream, Infer with a session_id, GetSession, CloseSession, ExportSession); the server sends it
// back in the initial metadata of every Stream that opens, resumes or forks a session, so a
// gateway learns where a new session lives from the first response. Metadata only: the server
// never reads it (the request's own session_id decides).
#pragma once

namespace attnserve {

inline constexpr char kSessionHeader[] = "x-attnserve-session";

}  // namespace attnserve
