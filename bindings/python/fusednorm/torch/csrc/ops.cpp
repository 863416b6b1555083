/* SPDX-License-Identifier: Apache-2.0 */
// libfusednorm's ops for PyTorch: custom ops registered with TORCH_LIBRARY
// (schema, a CUDA kernel calling the C ABI, autograd in C++, autocast rules),
// and the modules' eager entry points (pybind11), which take the module's
// tensors as Python objects and either run the op or answer None: the module
// then takes its Python path (torch.compile, FX, export, fake or wrapped
// tensors, layouts that need a copy, empty tensors, torch's fallback). The fake
// (meta) kernels are registered from Python (fusednorm/torch/_ops.py), where the
// size queries are reachable.
//
// The C ABI is reached through function pointers handed over by the Python
// binding (fusednorm::_bind_abi): the very library the binding loaded
// ($FNORM_LIB or the build tree), never a second copy, and no link step.
//
// Host time: an eager call is one pybind11 call taking Python objects (no
// argument casters), plain-tensor checks on dispatch keys, one hashed lookup
// of a plan (descriptors and workspace sizes per layout, built once), the
// output allocations from the caching allocator, and the launch; the
// dispatcher is skipped (a RecordFunction keeps the call visible to the
// profiler). Without gradients the LayerNorm/RMSNorm statistics are not
// written (the library takes NULL there).
//
// Double backward: when a graph of the gradient is asked for (create_graph,
// i.e. grad mode on inside backward), each backward recomputes its forward
// with ATen's differentiable operators and differentiates that, so the
// gradient is itself differentiable (torch's formula). Never None.
//
// One file per op (norm.cpp, batchnorm.cpp, linear.cpp, groupnorm.cpp, ...)
// holds its schemas (TORCH_LIBRARY_FRAGMENT), its kernels and its eager entry
// points over what common.hpp shares; this file holds the library's own
// functions and the extension module. Every csrc/*.cpp is compiled (build.py,
// meson.build): a new op's file drops in.
#include "common.hpp"

using namespace fnorm_torch;

TORCH_LIBRARY(fusednorm, m) {
  m.def("_bind_abi(int[] addrs) -> ()", &bind_abi);
  m.def("_abi_names() -> str[]", &abi_names);
}

// The modules' eager entry points, each op file's (EagerEntries); under
// torch.compile, FX and export the modules call torch.ops.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  for (const EagerInit &init : eager_entries()) init(m);
}
