// dpinfer_store_intruder HOST PORT SECONDS: a foreign client of a run's rendezvous store
// (issue 33's attack test, tests/worker/test_store_security.cpp). It connects with
// LibTorch's own c10d::TCPStore client, as anyone who can reach the port could, and for
// SECONDS keeps trying what the store's key names allow without the run's token: set the
// abort flag, claim dynamic chunks, pass the barriers, overwrite the statistics, and the
// same under a guessed token. It prints what it did on stdout, one line, at the end.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: dpinfer_store_intruder HOST PORT SECONDS\n");
    return 2;
  }
  const std::string host = argv[1];
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(std::atoi(argv[2]));
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = std::chrono::seconds(10);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[3]));
  long attempts = 0;
  try {
    c10d::TCPStore store(host, so);
    // The names the run's keys have under its token (README, Supervision), and under
    // prefixes a guesser might try.
    const std::vector<std::string> prefixes = {"", "dpinfer/run//", "dpinfer/run/00000000000000000000000000000000/"};
    while (std::chrono::steady_clock::now() < until) {
      for (const std::string& p : prefixes) {
        store.set(p + "dpinfer/abort", bytes("rank 0 failed: an intruder says stop"));
        store.add(p + "dpinfer/counter/next-batch", 1000);
        store.add(p + "dpinfer/counter/done-items", 1000);
        for (const char* b : {"model-loaded", "finished"}) store.add(p + "dpinfer/barrier/" + b, 1000);
        store.set(p + "dpinfer/gather/stats/0", bytes("{}"));
        store.set(p + "dpinfer/hello", bytes("1"));
        ++attempts;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::printf("intruder: %ld rounds of writes, %lld key(s) in the store\n", attempts,
                static_cast<long long>(store.getNumKeys()));
  } catch (const std::exception& e) {
    // The run ended and took its store with it: what the intruder did still counts.
    std::printf("intruder: %ld rounds of writes, then: %s\n", attempts, std::string(e.what()).substr(0, 80).c_str());
  }
  return 0;
}
