#include "dpinfer/io/json_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dpinfer/io/python_json.h"
#include "dpinfer/util/error.h"
#include "dpinfer/util/strings.h"

namespace dpinfer::io {
namespace {

/// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string reason_of(const nlohmann::json::exception& e) {
  std::string why = e.what();
  const size_t bracket = why.find("] ");
  if (bracket != std::string::npos) why = why.substr(bracket + 2);
  if (why.rfind("parse error ", 0) == 0) why = why.substr(12);  // "at line 1, column 2: ..."
  return printable(why, 200);
}

/// The file's bytes. POSIX calls rather than std::filesystem: the PyPI libtorch.so exports
/// its own std::filesystem symbols, and calls from its users can bind to them.
std::string read_bytes(const std::string& path) {
  const std::string where = quote(path);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(where + ": cannot read: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(where + ": cannot read: not a regular file");
  }
  if (static_cast<uintmax_t>(st.st_size) > kMaxJsonFileBytes) {
    ::close(fd);
    throw Error(where + " is " + std::to_string(st.st_size) + " bytes, more than any json file dpinfer reads (" +
                std::to_string(kMaxJsonFileBytes) + "); it is corrupt, re-download it");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw Error(where + ": cannot read: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return text;
}

/// Thrown from the parser callback to stop at the depth limit.
struct TooDeep {};

}  // namespace

nlohmann::json parse_json_text(std::string_view text) {
  auto limit = [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if (depth >= kMaxJsonDepth &&
        (event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start))
      throw TooDeep{};
    return true;
  };
  try {
    return parse_python_json(std::string(text), limit);
  } catch (const TooDeep&) {
    throw JsonSyntaxError("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number such as 1e999
    throw JsonSyntaxError(reason_of(e));
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& advice) {
  const std::string text = read_bytes(path);
  try {
    return parse_json_text(text);
  } catch (const JsonSyntaxError& e) {
    throw Error(quote(path) + " is not valid json (" + e.what() + "); " + advice);
  }
}

nlohmann::json read_json_object_file(const std::string& path, const std::string& advice) {
  nlohmann::json value = read_json_file(path, advice);
  if (!value.is_object())
    throw Error(quote(path) + " is a json " + std::string(value.type_name()) + ", expected an object; " + advice);
  return value;
}

}  // namespace dpinfer::io
