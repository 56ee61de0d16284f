/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Exit statuses of agentjail itself (payload statuses are mirrored). */
#define AJ_EXIT_SETUP 125 /* agentjail could not run the sandbox */
#define AJ_EXIT_USAGE 2   /* bad command line: nothing was started */

#include <getopt.h>

#include "agentjail.h"

int aj_cmd_run(int argc, char **argv);
int aj_cmd_policy(int argc, char **argv);
int aj_cmd_verify(int argc, char **argv);
int aj_cmd_probe(int argc, char **argv);
int aj_cmd_check(int argc, char **argv);
int aj_cmd_report(int argc, char **argv);
int aj_cmd_serve(int argc, char **argv);  /* in agentjail-serve (serve_main.c) */
int aj_cmd_mcp(int argc, char **argv);    /* in agentjail-serve (serve_main.c) */

/* Find --profile NAME and --policy FILE anywhere before "--" and load them
 * into pol (profile first), so that flags can override them whatever
 * their order. */
int aj_cli_load_base(int argc, char **argv, const struct option *opts, int profile_opt, int policy_opt,
                     struct aj_policy *pol, struct aj_error *err);
