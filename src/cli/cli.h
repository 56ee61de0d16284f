/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Exit statuses of agentjail itself (payload statuses are mirrored). */
#define AJ_EXIT_SETUP 125 /* agentjail could not run the sandbox */
#define AJ_EXIT_USAGE 2   /* bad command line: nothing was started */

int aj_cmd_run(int argc, char **argv);
