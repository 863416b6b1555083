/* SPDX-License-Identifier: Apache-2.0 */
// The one validation layer every op uses: descriptors given and set, sizes
// that agree, packed rows, the overlap rule, the workspace, the pack a set
// of pointers allows. Each check throws Error with a message that names the
// argument (core/error.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/arith.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace fnorm {

// The descriptor `arg` is given and was set, with a compute dtype (fp32,
// fp16, bf16) unless `quantized`, where it must be an output-only one
// (FP8 / INT8). BAD_PARAM_SHAPE names the dtype otherwise.
const fnorm_tensor_desc &require_set(const fnorm_tensor_desc *d, const char *arg, bool quantized = false);

// `d` has the dtype, rank and sizes of `ref`; with last >= 0 its last size
// must be `last` instead of ref's. BAD_PARAM_SHAPE otherwise.
void require_same_sizes(const fnorm_tensor_desc &d, const char *arg, const fnorm_tensor_desc &ref,
                        const char *ref_arg, int64_t last = -1);

// A tensor seen as a [rows, cols] matrix, the one view every op takes of
// its tensors: dimensions [axis, rank) packed row-major (the columns),
// dimensions [0, axis) collapsing into one row stride (size-1 dimensions may
// have any stride). packed_rows refuses (NOT_SUPPORTED) other layouts.
struct MatrixView {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t row_stride = 1;  // elements; cols when there is one row
  int64_t elements() const { return rows * cols; }
};
MatrixView packed_rows(const fnorm_tensor_desc &d, int32_t axis, const char *arg);

// Rows must not overlap each other: an output's are BAD_PARAM, an input's
// NOT_SUPPORTED.
void require_disjoint_rows(const MatrixView &l, const char *arg, bool output);

// The number of elements a descriptor describes (0 when a size is 0).
int64_t elements_of(const fnorm_tensor_desc &d);

// Overflow-checked size arithmetic. Every size computed from user
// dimensions (size queries, workspace layouts, tensor extents) goes through
// these: a result that does not fit in size_t is refused with
// BAD_PARAM_SHAPE naming `arg`, never wrapped around.
size_t checked_mul(size_t a, size_t b, const char *arg);
size_t checked_add(size_t a, size_t b, const char *arg);
size_t checked_align_up(size_t n, size_t to, const char *arg);

// Bytes from the first element to one past the last of `rows` rows of
// `cols` elements `row_stride` apart (checked, naming `arg`); 0 when there
// are no elements. A tensor whose extent fits in size_t has every element
// offset below 2^63 elements, so the kernels' int64 row * stride + col index
// math stays in range.
size_t span_bytes(int64_t rows, int64_t cols, int64_t row_stride, size_t elem_bytes, const char *arg);
inline size_t span_bytes(const MatrixView &m, size_t elem_bytes, const char *arg) {
  return span_bytes(m.rows, m.cols, m.row_stride, elem_bytes, arg);
}

// One buffer of a call: its extent (from the pointer to one past the last
// byte the call may touch; 0 for an empty tensor or an absent one), whether
// the call writes it, and its row stride (0: one contiguous run), which with
// the pointer and the extent tells "the very same tensor" apart from an
// overlapping one.
struct Buffer {
  const char *name;
  const void *ptr;
  uint64_t bytes;
  bool output = false;
  int64_t row_stride = 0;
};
inline Buffer input(const char *name, const void *ptr, uint64_t bytes, int64_t row_stride = 0) {
  return {name, ptr, bytes, false, row_stride};
}
inline Buffer output(const char *name, const void *ptr, uint64_t bytes, int64_t row_stride = 0) {
  return {name, ptr, bytes, true, row_stride};
}

// An output the call may compute in place over an input (or over another
// output): `out` may be the very same tensor as `other`.
struct InPlace {
  const char *out;
  const char *other;
};

// Every buffer of one call (with its extent and direction) and the in-place
// pairs the header allows it: what an op's buffers() step lists, and what
// the overlap rule and checked mode run over.
struct CallBuffers {
  static constexpr int kMaxBuffers = 16, kMaxInPlace = 4;
  Buffer buffer[kMaxBuffers];
  int count = 0;
  InPlace allowed[kMaxInPlace];
  int allowed_count = 0;
  CallBuffers() = default;
  CallBuffers(std::initializer_list<Buffer> buffers, std::initializer_list<InPlace> in_place = {});
  const Buffer *begin() const { return buffer; }
  const Buffer *end() const { return buffer + count; }
};

// The overlap rule of api/fusednorm.h, for every launch: among all of a
// call's buffers, no two of which one is written may overlap, except an
// allowed in-place pair that is exactly the same tensor (same pointer, same
// extent, same row stride). Inputs may overlap each other. NULL and empty
// buffers overlap nothing. BAD_PARAM naming both arguments otherwise.
void require_no_overlap(const CallBuffers &call);

// The workspace protocol: at least `need` bytes (INSUFFICIENT_WORKSPACE,
// naming the size query `query`), and when any is needed, not NULL and
// aligned to `align` bytes.
void require_workspace(const void *workspace, size_t bytes, size_t need, const char *query,
                       size_t align);

// Every non-NULL pointer is aligned to `bytes`.
bool all_aligned(std::initializer_list<const void *> ptrs, size_t bytes);

// The widest pack (elements of `elem_bytes`, at most `max_bytes` bytes)
// that `ok(pack)` accepts, trying powers of two downwards; 1 always fits.
template <class Ok>
int widest_pack(size_t elem_bytes, size_t max_bytes, Ok ok) {
  for (int p = static_cast<int>(max_bytes / elem_bytes); p > 1; p /= 2)
    if (ok(p)) return p;
  return 1;
}

}  // namespace fnorm
