#include "core/validate.hpp"

#include <cstring>

namespace fnorm {

const fnorm_tensor_desc &require_set(const fnorm_tensor_desc *d, const char *arg) {
  if (d == nullptr) fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
  FNORM_REQUIRE(d->is_set, FNORM_STATUS_BAD_PARAM,
                "argument '%s' was never set (call fnorm_tensor_desc_set first)", arg);
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

RowLayout packed_rows(const fnorm_tensor_desc &d, int32_t axis, const char *arg) {
  RowLayout l;
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

void require_disjoint_rows(const RowLayout &l, const char *arg, bool output) {
  if (l.rows <= 1) return;
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

size_t span_bytes(int64_t rows, int64_t cols, int64_t row_stride, size_t elem_bytes, const char *arg) {
  const size_t last_row = checked_mul(static_cast<size_t>(rows - 1), static_cast<size_t>(row_stride), arg);
  return checked_mul(checked_add(last_row, static_cast<size_t>(cols), arg), elem_bytes, arg);
}

namespace {
bool overlap(const Span &a, const Span &b) {
  if (a.ptr == nullptr || b.ptr == nullptr || a.bytes == 0 || b.bytes == 0) return false;
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a.ptr), pb = reinterpret_cast<uintptr_t>(b.ptr);
  return pa < pb + b.bytes && pb < pa + a.bytes;
}
}  // namespace

void require_disjoint(const Span &out, std::initializer_list<Span> others,
                      std::initializer_list<const char *> same_ok) {
  for (const Span &o : others) {
    if (!overlap(out, o)) continue;
    bool same = false;
    for (const char *n : same_ok)
      same = same || (std::strcmp(n, o.name) == 0 && out.ptr == o.ptr && out.row_stride == o.row_stride);
    FNORM_REQUIRE(same, FNORM_STATUS_BAD_PARAM,
                  "arguments '%s' and '%s' overlap without being the same tensor", out.name, o.name);
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
