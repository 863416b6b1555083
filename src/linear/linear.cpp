// Fully-connected layer on cuBLASLt (work in progress: only the handle state).
#include "internal.hpp"

namespace fnorm {

struct LinearState {};

void linear_state_destroy(LinearState *state) noexcept { delete state; }

}  // namespace fnorm
