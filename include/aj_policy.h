/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aj_error.h"

/* The one normalised policy: what the sandbox gets (host paths, variables,
 * network, limits, detection). Opaque: it is filled from policy files,
 * built-in profiles and keys set by name, each value checked as it is set,
 * and the whole checked again by every run (aj_policy_validate). Its
 * canonical JSON is what is hashed. Keys and their values are those of
 * policy files (docs/policy.md, or aj_policy_describe_keys).
 *
 * A policy is not locked: use one from one thread at a time, and do not
 * change it while a run or pool uses it. */
struct aj_policy;

/* A policy with every default. NULL when out of memory. */
AJ_EXPORT struct aj_policy *aj_policy_new(void);
/* Frees pol and all it holds; NULL is fine. */
AJ_EXPORT void aj_policy_free(struct aj_policy *pol);

/* Set one key from text, as a policy file or flag would give it:
 *   aj_policy_set(pol, "limits.memory", "512M", &err);
 *   aj_policy_set(pol, "network.mode", "none", &err);
 *   aj_policy_set(pol, "environment.set", "LANG=C.UTF-8", &err);   lists add
 * key is a key path ("limits.memory") or an `agentjail run` flag
 * ("--memory"); the error names it as given. value is the text form
 * ("512M", "10s", "0.5", "true"; NULL: no limit, or unset, where a key has
 * that, as null in a policy file). A flag that takes no argument ("--no-decoys") sets its value with
 * value NULL. The value is checked before it is stored: on error (-EINVAL,
 * errnum 0) pol is unchanged. filesystem.binds: use aj_policy_add_bind. */
AJ_EXPORT int aj_policy_set(struct aj_policy *pol, const char *key, const char *value,
                            struct aj_error *err);

/* Bind a host path, flag-shaped: spec "HOST[:SANDBOX]" (SANDBOX defaults to
 * HOST), read-only or writable. Binds are mounted in the order added. */
AJ_EXPORT int aj_policy_add_bind(struct aj_policy *pol, const char *spec, bool rw, struct aj_error *err);
/* The host owner ("UID:GID", never root's) of what the sandbox writes in
 * the bind added last, which must be writable (docs/policy.md, "owner").
 * Once per bind. */
AJ_EXPORT int aj_policy_set_bind_owner(struct aj_policy *pol, const char *owner, struct aj_error *err);

/* Whole-policy checks (ranges, conflicts, paths that must exist). The _at
 * form also names the policy key at fault ("filesystem.binds[1].sandbox"). */
AJ_EXPORT int aj_policy_validate(const struct aj_policy *pol, struct aj_error *err);
AJ_EXPORT int aj_policy_validate_at(const struct aj_policy *pol, char *ret_key, size_t key_size,
                                    struct aj_error *err);

/* The normalised policy as a policy file (every default filled in, sorted
 * keys): compact is the canonical form that is hashed, otherwise indented
 * for people. Loading it back gives the same policy and the same hash.
 * NULL on allocation failure. Caller frees. */
AJ_EXPORT char *aj_policy_to_json(const struct aj_policy *pol, bool compact);
#define aj_policy_canonical_json(pol) aj_policy_to_json((pol), true)
AJ_EXPORT int aj_policy_sha256(const struct aj_policy *pol, char ret_hex[65],
                               struct aj_error *err);

/* The interpreter the policy names (interpreter.language): "python", or
 * NULL for none. A pool of such a policy parks warm interpreters, and a
 * run of `python3 -c CODE ...` or `python3 SCRIPT ...` under it uses the
 * interpreter's bootstrap (docs/interpreters.md). */
AJ_EXPORT const char *aj_policy_interpreter(const struct aj_policy *pol);

/* Policy files (JSON; see docs/policy.md). Loading fills pol on top of what
 * it holds (a profile, an earlier file). Errors name FILE:LINE:COLUMN and
 * the key path (errnum 0: bad input). */
AJ_EXPORT int aj_policy_load_file(struct aj_policy *pol, const char *path, struct aj_error *err);
AJ_EXPORT int aj_policy_load_buffer(struct aj_policy *pol, const char *buf, size_t len,
                                    const char *name, struct aj_error *err);
/* Built-in profiles, compiled in from the JSON files in profiles/. */
AJ_EXPORT int aj_policy_load_profile(struct aj_policy *pol, const char *name, struct aj_error *err);
AJ_EXPORT const char *const *aj_policy_profile_names(void);

/* What a reviewer needs: one line per protection that differs between a
 * and b, saying which side is weaker. NULL when they are the same (and
 * *ret_oom set on allocation failure). Caller frees. */
AJ_EXPORT char *aj_policy_diff(const struct aj_policy *a, const struct aj_policy *b, bool *ret_oom);

/* The key reference: every key with its type, default, range, flag and
 * what it protects against; Markdown tables (docs/policy.md's, generated
 * from this) or plain lines. NULL on allocation failure. Caller frees. */
AJ_EXPORT char *aj_policy_describe_keys(bool markdown);

/* Strict number parsing shared by every caller (no atoi, no sscanf). */
AJ_EXPORT int aj_parse_u64(const char *s, uint64_t max, uint64_t *ret);
/* "UID:GID", decimal, each below 4294967295. -EINVAL otherwise. */
AJ_EXPORT int aj_parse_owner(const char *s, uint32_t *ret_uid, uint32_t *ret_gid);
AJ_EXPORT int aj_parse_size(const char *s, uint64_t *ret);        /* 512, 64K, 512M, 1G */
AJ_EXPORT int aj_parse_duration_ms(const char *s, uint64_t *ret); /* 10, 10s, 500ms, 2m */
