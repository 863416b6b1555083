// The BatchNorm cuDNN engine (work in progress: only the handle state).
#include "internal.hpp"

namespace fnorm {

struct CudnnState {};

void cudnn_state_destroy(CudnnState *state) noexcept { delete state; }

}  // namespace fnorm
