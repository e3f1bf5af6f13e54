// Whether an HTTP client is still there while its request is being computed. cpp-httplib 0.11
// tells a handler nothing of its connection until it writes, and a completion that is not
// streamed writes only at its end; so the handler finds its connection's socket (the one
// whose local and peer addresses are the request's: unique while the connection is open)
// and polls it for the peer's shutdown, to cancel the work of a client that went away.
//
// Threads: any; FindConnectionSocket reads /proc/self/fd (one getsockname and getpeername per
// open descriptor: tens of microseconds for a few hundred).
#pragma once

#include <string>

namespace attnserve::server::openai {

// The socket of the TCP connection from `remote_addr`:`remote_port` to local port
// `local_port`, or -1 when none is found. Borrowed: the HTTP server owns and closes it.
int FindConnectionSocket(const std::string& remote_addr, int remote_port, int local_port);

// Whether the peer of `socket` has closed or reset the connection (polls without waiting).
bool PeerClosed(int socket);

}  // namespace attnserve::server::openai
