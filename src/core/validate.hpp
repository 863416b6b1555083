// The one validation layer every op uses: descriptors given and set, sizes
// that agree, packed rows, outputs that overlap nothing, the workspace, the
// pack a set of pointers allows. Each check throws Error with a message that
// names the argument (core/error.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/arith.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#include "kernel_config.hpp"

namespace fnorm {

// The descriptor `arg` is given and was set.
const fnorm_tensor_desc &require_set(const fnorm_tensor_desc *d, const char *arg);

// `d` has the dtype, rank and sizes of `ref`; with last >= 0 its last size
// must be `last` instead of ref's. BAD_PARAM_SHAPE otherwise.
void require_same_sizes(const fnorm_tensor_desc &d, const char *arg, const fnorm_tensor_desc &ref,
                        const char *ref_arg, int64_t last = -1);

// A tensor as a [rows, cols] matrix: dimensions [axis, rank) packed row-major
// (the columns), dimensions [0, axis) collapsing into one row stride (size-1
// dimensions may have any stride). Refused (NOT_SUPPORTED) otherwise.
struct RowLayout {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t row_stride = 1;  // elements; cols when there is one row
};
RowLayout packed_rows(const fnorm_tensor_desc &d, int32_t axis, const char *arg);

// Rows must not overlap each other: an output's are BAD_PARAM, an input's
// NOT_SUPPORTED.
void require_disjoint_rows(const RowLayout &l, const char *arg, bool output);

// Overflow-checked size arithmetic. Every size computed from user
// dimensions (size queries, workspace layouts, tensor extents) goes through
// these: a result that does not fit in size_t is refused with
// BAD_PARAM_SHAPE naming `arg`, never wrapped around.
size_t checked_mul(size_t a, size_t b, const char *arg);
size_t checked_add(size_t a, size_t b, const char *arg);
size_t checked_align_up(size_t n, size_t to, const char *arg);

// Bytes from the first element to one past the last of `rows` rows of
// `cols` elements `row_stride` apart (checked, naming `arg`). A tensor whose
// extent fits in size_t has every element offset below 2^63 elements, so the
// kernels' int64 row * stride + col index math stays in range.
size_t span_bytes(int64_t rows, int64_t cols, int64_t row_stride, size_t elem_bytes, const char *arg);

// A region of memory, for the overlap check. Two regions are "the same
// tensor" when they start at the same address with the same row stride.
struct Span {
  const char *name;
  const void *ptr;
  uint64_t bytes;
  int64_t row_stride = 0;
};

// `out` overlaps none of `others` (NULL or empty regions never overlap),
// except by being exactly the same tensor as one named in `same_ok`
// (in-place). BAD_PARAM naming both arguments otherwise.
void require_disjoint(const Span &out, std::initializer_list<Span> others,
                      std::initializer_list<const char *> same_ok = {});

// The workspace protocol: at least `need` bytes (INSUFFICIENT_WORKSPACE,
// naming the size query `query`), and when any is needed, not NULL and
// aligned to `align` bytes.
void require_workspace(const void *workspace, size_t bytes, size_t need, const char *query,
                       size_t align);

// Every non-NULL pointer is aligned to `bytes`.
bool all_aligned(std::initializer_list<const void *> ptrs, size_t bytes);

// The widest pack (elements of `elem_bytes`, at most kMaxPackBytes) that
// `ok(pack)` accepts, trying powers of two downwards; 1 always fits.
template <class Ok>
int widest_pack(size_t elem_bytes, Ok ok) {
  for (int p = static_cast<int>(kMaxPackBytes / elem_bytes); p > 1; p /= 2)
    if (ok(p)) return p;
  return 1;
}

}  // namespace fnorm
