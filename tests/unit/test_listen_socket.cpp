// Where rank 0's store listens (util/listen_socket.h), with real sockets: the address
// MASTER_ADDR resolves to on this host, else every interface with the reason.
#include "dpinfer/util/listen_socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dpinfer/util/error.h"
#include "support/subprocess.h"

using dpinfer::is_loopback_address;
using dpinfer::listen_for_store;
using dpinfer::ListenSocket;

namespace {
namespace DPINFER_UNITY_ID {  // this file's own names in a unity batch (cmake/UnityBuild.cmake)

/// The address `fd` is bound to, as "a.b.c.d".
std::string bound_ipv4(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char text[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
  return text;
}

struct Closed {
  ListenSocket s;
  ~Closed() {
    if (s.fd >= 0) ::close(s.fd);
  }
};


TEST(ListenSocket, LoopbackMasterAddrOnOneNodeListensOnTheLoopbackOnly) {
  const int port = dpinfer::test::free_port();
  Closed c{listen_for_store("127.0.0.1", port, true)};
  EXPECT_EQ(c.s.address, "127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(c.s.fallback, "");
  EXPECT_EQ(bound_ipv4(c.s.fd), "127.0.0.1");
  // It listens: a client connects.
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::close(client);
}

TEST(ListenSocket, LocalhostResolvesToALoopbackAddress) {
  const int port = dpinfer::test::free_port();
  Closed c{listen_for_store("localhost", port, true)};
  EXPECT_EQ(c.s.fallback, "");
  EXPECT_TRUE(c.s.address == "127.0.0.1:" + std::to_string(port) || c.s.address == "[::1]:" + std::to_string(port))
      << c.s.address;
}

TEST(ListenSocket, LoopbackMasterAddrAcrossNodesListensEverywhereAndSaysWhy) {
  const int port = dpinfer::test::free_port();
  Closed c{listen_for_store("127.0.0.1", port, false)};
  EXPECT_EQ(c.s.address, "0.0.0.0:" + std::to_string(port));
  EXPECT_EQ(bound_ipv4(c.s.fd), "0.0.0.0");
  EXPECT_EQ(c.s.fallback,
            "MASTER_ADDR '127.0.0.1' resolves to the loopback address 127.0.0.1 on rank 0's host, which the other "
            "nodes cannot reach");
}

TEST(ListenSocket, AnAddressOfAnotherHostListensEverywhereAndSaysWhy) {
  const int port = dpinfer::test::free_port();
  // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never an address of this host.
  Closed c{listen_for_store("192.0.2.7", port, false)};
  EXPECT_EQ(c.s.address, "0.0.0.0:" + std::to_string(port));
  EXPECT_EQ(c.s.fallback, "MASTER_ADDR '192.0.2.7' resolves to 192.0.2.7, which is not an address of rank 0's host");
}

TEST(ListenSocket, APortInUseIsNamed) {
  const int port = dpinfer::test::free_port();
  Closed first{listen_for_store("127.0.0.1", port, true)};
  try {
    Closed second{listen_for_store("127.0.0.1", port, true)};
    FAIL() << "bound twice";
  } catch (const dpinfer::Error& e) {
    EXPECT_EQ(std::string(e.what()), "port 127.0.0.1:" + std::to_string(port) +
                                         " is already in use on this host; pick another MASTER_PORT (--master-port)");
  }
}

TEST(ListenSocket, AnUnresolvableMasterAddrIsNamed) {
  try {
    Closed c{listen_for_store("no-such-host.invalid", dpinfer::test::free_port(), true)};
    FAIL() << "resolved";
  } catch (const dpinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR 'no-such-host.invalid' does not resolve on rank 0's host"),
              std::string::npos)
        << e.what();
  }
}

TEST(ListenSocket, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));  // Debian's /etc/hosts line for the host's own name
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("::ffff:10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("fe80::1"));
  EXPECT_FALSE(is_loopback_address("localhost"));  // numeric addresses only
}

}  // namespace DPINFER_UNITY_ID
}  // namespace
