#pragma once
// The socket that rank 0's rendezvous store listens on (issue 33). c10d's TCPStore
// binds every interface by itself (`*:PORT`), so that on a shared login or GPU node any
// user, and on a cluster network any host, can reach the store. Here rank 0 binds the
// address that the other ranks connect to instead, and hands the bound socket to the
// store (c10d::TCPStoreOptions::masterListenFd).

#include <string>

namespace dpinfer {

struct ListenSocket {
  int fd = -1;           ///< listening, close-on-exec; whoever takes it closes it
  std::string address;   ///< where it listens: "127.0.0.1:29500", "[::1]:29500", "0.0.0.0:29500"
  std::string fallback;  ///< empty when bound where `host` resolves; else why it listens on every interface
};

/// Binds TCP `port` at the address that `host` (MASTER_ADDR) resolves to on this host,
/// and listens. Where that is not possible it listens on every interface and says why in
/// `fallback`:
/// - `host` resolves to a loopback address but the run spans nodes (`single_node` false):
///   Debian's /etc/hosts maps the host's own name to 127.0.1.1, and the other nodes could
///   not reach it there;
/// - `host` is not an address of this host (NAT, a virtual address): bind() says
///   EADDRNOTAVAIL.
/// Throws Error when the port is in use or needs privileges, or `host` does not resolve.
ListenSocket listen_for_store(const std::string& host, int port, bool single_node);

/// True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104, given as a numeric address.
bool is_loopback_address(const std::string& numeric_address);

}  // namespace dpinfer
