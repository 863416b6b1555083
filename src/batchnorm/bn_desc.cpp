/* SPDX-License-Identifier: Apache-2.0 */
// The BatchNorm descriptor API (fnorm_batchnorm_desc_*).
#include <cmath>

#include "batchnorm/batchnorm.hpp"

extern "C" {

FNORM_API fnorm_status_t fnorm_batchnorm_desc_create(fnorm_batchnorm_desc_t *desc) {
  return fnorm::create_object(__func__, desc);
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_destroy(fnorm_batchnorm_desc_t desc) { return fnorm::destroy_object(desc); }

FNORM_API fnorm_status_t fnorm_batchnorm_desc_set(fnorm_batchnorm_desc_t desc,
                                                  fnorm_bn_epilogue_t epilogue, double epsilon,
                                                  fnorm_bn_average_t average, double momentum) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(epilogue == FNORM_BN_EPILOGUE_NONE || epilogue == FNORM_BN_EPILOGUE_RELU ||
                      epilogue == FNORM_BN_EPILOGUE_ADD_RELU,
                  FNORM_STATUS_BAD_PARAM, "argument 'epilogue' has unknown value %d",
                  static_cast<int>(epilogue));
    FNORM_REQUIRE(std::isfinite(epsilon) && epsilon >= 0.0, FNORM_STATUS_BAD_PARAM,
                  "argument 'epsilon' is %g; it must be finite and >= 0", epsilon);
    FNORM_REQUIRE(average == FNORM_BN_AVERAGE_EXPONENTIAL || average == FNORM_BN_AVERAGE_CUMULATIVE,
                  FNORM_STATUS_BAD_PARAM, "argument 'average' has unknown value %d",
                  static_cast<int>(average));
    FNORM_REQUIRE(momentum >= 0.0 && momentum <= 1.0, FNORM_STATUS_BAD_PARAM,
                  "argument 'momentum' is %g; it must be in [0, 1]", momentum);
    desc->epilogue = epilogue;
    desc->epsilon = epsilon;
    desc->average = average;
    desc->momentum = momentum;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_get(fnorm_batchnorm_desc_t desc,
                                                  fnorm_bn_epilogue_t *epilogue, double *epsilon,
                                                  fnorm_bn_average_t *average, double *momentum) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (epilogue) *epilogue = desc->epilogue;
    if (epsilon) *epsilon = desc->epsilon;
    if (average) *average = desc->average;
    if (momentum) *momentum = desc->momentum;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_set_engine(fnorm_batchnorm_desc_t desc,
                                                         fnorm_bn_engine_t engine) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(engine == FNORM_BN_ENGINE_AUTO || engine == FNORM_BN_ENGINE_NATIVE ||
                      engine == FNORM_BN_ENGINE_CUDNN,
                  FNORM_STATUS_BAD_PARAM, "argument 'engine' has unknown value %d",
                  static_cast<int>(engine));
    desc->engine = engine;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_get_engine(fnorm_batchnorm_desc_t desc,
                                                         fnorm_bn_engine_t *engine) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE_NOT_NULL(engine);
    *engine = desc->engine;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_set_comm(fnorm_batchnorm_desc_t desc,
                                                       struct ncclComm *comm, uint32_t flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE((flags & ~static_cast<uint32_t>(FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS)) == 0,
                  FNORM_STATUS_BAD_PARAM, "argument 'flags' has unknown bits 0x%x", flags);
    FNORM_REQUIRE(comm == nullptr || fnorm::nccl_built(), FNORM_STATUS_NOT_SUPPORTED_BUILD,
                  "SyncBatchNorm was left out of this build (NCCL not found; meson option 'nccl')");
    desc->comm = comm;
    desc->sync_flags = flags;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_get_comm(fnorm_batchnorm_desc_t desc,
                                                       struct ncclComm **comm, uint32_t *flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (comm) *comm = desc->comm;
    if (flags) *flags = desc->sync_flags;
  });
}

}  // extern "C"
