#pragma once

namespace dpinfer {

/// "0.1.0" or, in a git checkout, what `git describe` said at configure time.
const char* version();

}  // namespace dpinfer
