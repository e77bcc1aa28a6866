#include "dpinfer/util/listen_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "dpinfer/util/error.h"

namespace dpinfer {
namespace {

/// c10d's libuv store backend listens with a backlog of 16384; the kernel caps it at
/// net.core.somaxconn anyway.
constexpr int kBacklog = 16384;

std::string numeric_host(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST] = {0};
  if (::getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

std::string with_port(const std::string& numeric, int family, int port) {
  return (family == AF_INET6 ? "[" + numeric + "]" : numeric) + ":" + std::to_string(port);
}

/// Binds and listens; returns the fd, or -errno of the bind (a socket() or listen()
/// failure throws).
int bind_and_listen(int family, const sockaddr* sa, socklen_t len, bool v6_only) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw SystemError("socket", errno);
  // As TCPStore itself does: a port in TIME_WAIT from an earlier run is free.
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (family == AF_INET6) {
    int v6only = v6_only ? 1 : 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
  }
  if (::bind(fd, sa, len) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  if (::listen(fd, kBacklog) != 0) {
    const int err = errno;
    ::close(fd);
    throw SystemError("listen", err);
  }
  return fd;
}

[[noreturn]] void throw_bind_error(int err, const std::string& where) {
  if (err == EADDRINUSE)
    throw Error("port " + where + " is already in use on this host; pick another MASTER_PORT (--master-port)");
  if (err == EACCES) throw Error("port " + where + " needs privileges to bind; use a port of 1024 or more");
  throw SystemError("bind(" + where + ")", err);
}

}  // namespace

bool is_loopback_address(const std::string& numeric_address) {
  in_addr v4{};
  if (::inet_pton(AF_INET, numeric_address.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, numeric_address.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

ListenSocket listen_for_store(const std::string& host, int port, bool single_node) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw Error("MASTER_ADDR '" + host + "' does not resolve on rank 0's host (" + ::gai_strerror(rc) +
                "); give a host name or address that every node resolves to rank 0's node");
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);

  bool any_v4 = false;
  std::string skipped_loopback, not_ours;
  for (const addrinfo* ai = found; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    any_v4 = any_v4 || ai->ai_family == AF_INET;
    const std::string numeric = numeric_host(ai->ai_addr, ai->ai_addrlen);
    if (!single_node && is_loopback_address(numeric)) {
      skipped_loopback = numeric;
      continue;
    }
    const int fd = bind_and_listen(ai->ai_family, ai->ai_addr, ai->ai_addrlen, true);
    if (fd >= 0) return {fd, with_port(numeric, ai->ai_family, port), ""};
    if (-fd != EADDRNOTAVAIL) throw_bind_error(-fd, with_port(numeric, ai->ai_family, port));
    not_ours = numeric;
  }

  // Every interface: the IPv4 wildcard when MASTER_ADDR has an IPv4 address (the clients
  // connect to one of those), else the IPv6 one, dual-stack.
  ListenSocket s;
  if (!skipped_loopback.empty())
    s.fallback = "MASTER_ADDR '" + host + "' resolves to the loopback address " + skipped_loopback +
                 " on rank 0's host, which the other nodes cannot reach";
  else if (!not_ours.empty())
    s.fallback = "MASTER_ADDR '" + host + "' resolves to " + not_ours + ", which is not an address of rank 0's host";
  else
    s.fallback = "MASTER_ADDR '" + host + "' resolves to no IPv4 or IPv6 address";
  if (any_v4 || found == nullptr) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    s.address = "0.0.0.0:" + service;
    s.fd = bind_and_listen(AF_INET, reinterpret_cast<const sockaddr*>(&a), sizeof a, false);
  } else {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    s.address = "[::]:" + service;
    s.fd = bind_and_listen(AF_INET6, reinterpret_cast<const sockaddr*>(&a), sizeof a, false);
  }
  if (s.fd < 0) throw_bind_error(-s.fd, s.address);
  return s;
}

}  // namespace dpinfer
