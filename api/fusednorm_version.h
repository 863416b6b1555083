/* SPDX-License-Identifier: Apache-2.0 */
/** @file
 * libfusednorm version: the single source of truth.
 * meson.build's project() takes its version from these three lines (through
 * scripts/version.py), and the soversion from the major; so do the Python
 * wheel's metadata; fnorm_get_version() returns FNORM_VERSION. */
#ifndef FUSEDNORM_VERSION_H
#define FUSEDNORM_VERSION_H

/** Major version: changes with an incompatible ABI change (and the soname). */
#define FNORM_VERSION_MAJOR 0
/** Minor version: additions to the ABI (README "Compatibility"). */
#define FNORM_VERSION_MINOR 1
/** Patch version: fixes only. */
#define FNORM_VERSION_PATCH 0

/** The version as one number, as fnorm_get_version() returns it. Encoding
 *  (never changes): major * 10000 + minor * 100 + patch. */
#define FNORM_VERSION \
  (FNORM_VERSION_MAJOR * 10000 + FNORM_VERSION_MINOR * 100 + FNORM_VERSION_PATCH)

#endif /* FUSEDNORM_VERSION_H */
