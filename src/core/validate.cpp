/* SPDX-License-Identifier: Apache-2.0 */
#include "core/validate.hpp"

#include <cstring>

namespace fnorm {

const fnorm_tensor_desc &require_set(const fnorm_tensor_desc *d, const char *arg, bool quantized) {
  if (d == nullptr) fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
  FNORM_REQUIRE(d->is_set, FNORM_STATUS_BAD_PARAM,
                "argument '%s' was never set (call fnorm_tensor_desc_set first)", arg);
  FNORM_REQUIRE(is_quantized_dtype(d->dtype) == quantized, FNORM_STATUS_BAD_PARAM_SHAPE,
                quantized ? "argument '%s': dtype %s is not a quantized output dtype (FLOAT8_E4M3, FLOAT8_E5M2, INT8)"
                          : "argument '%s': dtype %s is an output dtype of fnorm_norm_fwd_quant only",
                arg, dtype_name(d->dtype));
  return *d;
}

void require_same_sizes(const fnorm_tensor_desc &d, const char *arg, const fnorm_tensor_desc &ref,
                        const char *ref_arg, int64_t last) {
  FNORM_REQUIRE(d.dtype == ref.dtype, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': dtype %s differs from %s's %s", arg, dtype_name(d.dtype), ref_arg,
                dtype_name(ref.dtype));
  FNORM_REQUIRE(d.rank == ref.rank, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': rank %d differs from %s's %d", arg, d.rank, ref_arg, ref.rank);
  const int32_t same_up_to = last >= 0 ? d.rank - 1 : d.rank;
  for (int32_t i = 0; i < same_up_to; ++i) {
    FNORM_REQUIRE(d.dims[i] == ref.dims[i], FNORM_STATUS_BAD_PARAM_SHAPE,
                  "argument '%s': dims[%d] is %lld but %s's is %lld", arg, i,
                  static_cast<long long>(d.dims[i]), ref_arg, static_cast<long long>(ref.dims[i]));
  }
  if (last >= 0) {
    FNORM_REQUIRE(d.dims[d.rank - 1] == last, FNORM_STATUS_BAD_PARAM_SHAPE,
                  "argument '%s': the last size is %lld; it must be %lld", arg,
                  static_cast<long long>(d.dims[d.rank - 1]), static_cast<long long>(last));
  }
}

MatrixView packed_rows(const fnorm_tensor_desc &d, int32_t axis, const char *arg) {
  MatrixView l;
  if (elements_of(d) == 0) {  // no element to address: any strides will do
    l.cols = 1;
    for (int32_t i = axis; i < d.rank; ++i) l.cols *= d.dims[i];
    for (int32_t i = 0; i < axis; ++i) l.rows *= d.dims[i];
    l.row_stride = l.cols;
    return l;
  }
  int64_t expected = 1;
  for (int32_t i = d.rank - 1; i >= axis; --i) {
    FNORM_REQUIRE(d.dims[i] == 1 || d.strides[i] == expected, FNORM_STATUS_NOT_SUPPORTED,
                  "argument '%s': dimensions %d.. must be packed, but strides[%d] is %lld where "
                  "%lld was expected",
                  arg, axis, i, static_cast<long long>(d.strides[i]),
                  static_cast<long long>(expected));
    expected *= d.dims[i];
  }
  l.cols = expected;
  l.row_stride = l.cols;
  int64_t collapsed = -1;  // the stride the next slower dimension must have
  for (int32_t i = axis - 1; i >= 0; --i) {
    l.rows *= d.dims[i];
    if (d.dims[i] == 1) continue;
    if (collapsed < 0) {
      l.row_stride = d.strides[i];
    } else {
      FNORM_REQUIRE(d.strides[i] == collapsed, FNORM_STATUS_NOT_SUPPORTED,
                    "argument '%s': the row dimensions do not collapse into one row stride "
                    "(strides[%d] is %lld, expected %lld)",
                    arg, i, static_cast<long long>(d.strides[i]),
                    static_cast<long long>(collapsed));
    }
    FNORM_REQUIRE(d.strides[i] <= INT64_MAX / d.dims[i], FNORM_STATUS_BAD_PARAM,
                  "argument '%s': strides[%d] * dims[%d] overflows int64", arg, i, i);
    collapsed = d.strides[i] * d.dims[i];
  }
  return l;
}

void require_disjoint_rows(const MatrixView &l, const char *arg, bool output) {
  if (l.rows <= 1 || l.cols == 0) return;
  FNORM_REQUIRE(l.row_stride >= l.cols, output ? FNORM_STATUS_BAD_PARAM : FNORM_STATUS_NOT_SUPPORTED,
                "argument '%s': rows overlap (row stride %lld < %lld columns)%s", arg,
                static_cast<long long>(l.row_stride), static_cast<long long>(l.cols),
                output ? "" : "; overlapping input rows are not supported");
}

namespace {
[[noreturn]] void fail_overflow(const char *arg, size_t a, const char *op, size_t b) {
  fail(FNORM_STATUS_BAD_PARAM_SHAPE,
       "argument '%s': the sizes it describes overflow size_t (%zu %s %zu); no buffer of that size "
       "can exist",
       arg, a, op, b);
}
}  // namespace

size_t checked_mul(size_t a, size_t b, const char *arg) {
  size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail_overflow(arg, a, "*", b);
  return r;
}

size_t checked_add(size_t a, size_t b, const char *arg) {
  size_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail_overflow(arg, a, "+", b);
  return r;
}

size_t checked_align_up(size_t n, size_t to, const char *arg) {
  return checked_add(n, to - 1, arg) / to * to;
}

int64_t elements_of(const fnorm_tensor_desc &d) {
  int64_t n = 1;
  for (int32_t i = 0; i < d.rank; ++i) n *= d.dims[i];
  return n;
}

size_t span_bytes(int64_t rows, int64_t cols, int64_t row_stride, size_t elem_bytes, const char *arg) {
  if (rows <= 0 || cols <= 0) return 0;
  const size_t last_row = checked_mul(static_cast<size_t>(rows - 1), static_cast<size_t>(row_stride), arg);
  return checked_mul(checked_add(last_row, static_cast<size_t>(cols), arg), elem_bytes, arg);
}

namespace {
bool overlap(const Buffer &a, const Buffer &b) {
  if (a.ptr == nullptr || b.ptr == nullptr || a.bytes == 0 || b.bytes == 0) return false;
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a.ptr), pb = reinterpret_cast<uintptr_t>(b.ptr);
  // Distances, not end addresses: an extent near SIZE_MAX must not wrap.
  return pa >= pb ? pa - pb < b.bytes : pb - pa < a.bytes;
}

bool allowed_pair(const Buffer &a, const Buffer &b, const CallBuffers &call) {
  for (int i = 0; i < call.allowed_count; ++i) {
    const InPlace &p = call.allowed[i];
    if ((std::strcmp(p.out, a.name) == 0 && std::strcmp(p.other, b.name) == 0) ||
        (std::strcmp(p.out, b.name) == 0 && std::strcmp(p.other, a.name) == 0))
      return true;
  }
  return false;
}
}  // namespace

CallBuffers::CallBuffers(std::initializer_list<Buffer> buffers, std::initializer_list<InPlace> in_place) {
  FNORM_REQUIRE(buffers.size() <= kMaxBuffers && in_place.size() <= kMaxInPlace, FNORM_STATUS_INTERNAL_ERROR,
                "more buffers than CallBuffers holds");
  for (const Buffer &b : buffers) buffer[count++] = b;
  for (const InPlace &p : in_place) allowed[allowed_count++] = p;
}

void require_no_overlap(const CallBuffers &call) {
  for (const Buffer *a = call.begin(); a != call.end(); ++a) {
    for (const Buffer *b = a + 1; b != call.end(); ++b) {
      if (!(a->output || b->output) || !overlap(*a, *b)) continue;
      const bool pair = allowed_pair(*a, *b, call);
      const bool same = a->ptr == b->ptr && a->bytes == b->bytes && a->row_stride == b->row_stride;
      FNORM_REQUIRE(pair && same, FNORM_STATUS_BAD_PARAM, "arguments '%s' and '%s' overlap%s", a->name, b->name,
                    pair ? " without being the very same tensor (in place)" : "; this call allows no overlap between them");
    }
  }
}

void require_workspace(const void *workspace, size_t bytes, size_t need, const char *query,
                       size_t align) {
  FNORM_REQUIRE(bytes >= need, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
                "argument 'workspace_bytes' is %zu; this call needs %zu (ask %s)", bytes, need, query);
  if (need == 0) return;
  FNORM_REQUIRE(workspace != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument 'workspace' is NULL; this call needs %zu bytes", need);
  FNORM_REQUIRE(is_aligned(workspace, align), FNORM_STATUS_BAD_PARAM,
                "argument 'workspace' (%p) is not %zu-byte aligned", workspace, align);
}

bool all_aligned(std::initializer_list<const void *> ptrs, size_t bytes) {
  for (const void *p : ptrs)
    if (p != nullptr && !is_aligned(p, bytes)) return false;
  return true;
}

}  // namespace fnorm
