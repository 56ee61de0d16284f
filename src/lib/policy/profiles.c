/* SPDX-License-Identifier: Apache-2.0 */
/* Built-in profiles: the JSON files in profiles/, compiled in by
 * tools/embed-profiles.py (nothing is looked up at run time, so there is
 * no search path to hijack), loaded like any policy file. */
#include <stdio.h>
#include <string.h>

#include "aj_policy_model.h"
#include "aj_util.h"

struct aj_profile_blob {
    const char *name;
    const char *json;
};
extern const struct aj_profile_blob aj_builtin_profiles[]; /* generated: tools/embed-profiles.py */

const char *const *aj_policy_profile_names(void)
{
    static const char *names[16];
    size_t n = 0;
    for (size_t i = 0; aj_builtin_profiles[i].name && n + 1 < AJ_ARRAY_SIZE(names); i++)
        names[n++] = aj_builtin_profiles[i].name;
    names[n] = NULL;
    return names;
}

int aj_policy_load_profile(struct aj_policy *pol, const char *name, struct aj_error *err)
{
    char label[96];
    char list[256] = "";

    for (size_t i = 0; aj_builtin_profiles[i].name; i++)
        if (strcmp(aj_builtin_profiles[i].name, name) == 0) {
            (void)snprintf(label, sizeof(label), "profile %s", name);
            return aj_policy_load_buffer(pol, aj_builtin_profiles[i].json, strlen(aj_builtin_profiles[i].json),
                                         label, err);
        }
    for (size_t i = 0; aj_builtin_profiles[i].name; i++)
        if (strlen(list) + strlen(aj_builtin_profiles[i].name) + 3 < sizeof(list)) {
            if (i)
                strcat(list, ", ");
            strcat(list, aj_builtin_profiles[i].name);
        }
    return aj_err(err, 0, "unknown profile '%s'; built-in profiles: %s", name, list);
}
