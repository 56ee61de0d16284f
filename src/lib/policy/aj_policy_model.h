/* SPDX-License-Identifier: Apache-2.0 */
/* The policy model inside the library. For now the struct is still the
 * public one (include/aj_policy.h); it moves here when the public type
 * becomes opaque. Layers include this header, not the public one. */
#pragma once

#include "aj_policy.h"
