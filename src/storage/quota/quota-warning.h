/* Quota warnings (document 3, States): which `quota_warnings` rules a
 * change of usage crosses, and running their programs.
 *
 * A rule with threshold `over` and percentage P crosses when usage goes
 * from below P % of the limit to at or above it; `under` when it goes from
 * at or above to below. So a program runs once per crossing, never again
 * while usage stays on the same side. Unlimited resources never cross.
 *
 * The runner starts `quota_warning_bin_dir/<execute>` directly (no shell:
 * posix_spawn of a bare program name validated at configuration), in its
 * own process group, stdin/stdout/stderr on /dev/null, with exactly the
 * environment document 3 lists: USER, HOME, HOST, QUOTA_WARNING_NAME,
 * QUOTA_RESOURCE (storage|message), QUOTA_THRESHOLD (over|under),
 * QUOTA_PERCENTAGE, QUOTA_USAGE, QUOTA_LIMIT. It never waits: the child's
 * exit is seen through a pidfd on the event loop, and a child still
 * running after quota_warning_exec_timeout is killed (SIGKILL to its
 * group). Without a bin dir, or for a rule without a program, the
 * crossing is only logged. At most QUOTA_WARNING_MAX_RUNNING programs run
 * at once; more crossings meanwhile are logged and dropped.
 * Metric: petrel_quota_warnings_total{result=ok|failed|timeout|logged|dropped}.
 * One runner per event loop; not thread-safe. */
#ifndef PETREL_STORAGE_QUOTA_WARNING_H
#define PETREL_STORAGE_QUOTA_WARNING_H

#include "core/metrics.h"
#include "storage/quota/quota-config.h"
#include "storage/quota/quota-limits.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

#define QUOTA_WARNING_MAX_RUNNING 64

/* Fills `out` (room for cfg->warning_count) with the rules the change from
 * `before` to `after` crosses, in configuration order; returns how many. */
size_t quota_warnings_crossed(const struct quota_config *cfg, const struct quota_limits *limits,
                              const struct quota_usage *before, const struct quota_usage *after,
                              const struct quota_warning_config **out);

struct quota_warning_runner;

/* `cfg` and `base` are borrowed and outlive the runner; `metrics` may be NULL. */
struct quota_warning_runner *quota_warning_runner_new(struct event_base *base,
                                                      const struct quota_config *cfg,
                                                      struct metrics_registry *metrics);
/* Kills (SIGKILL) and reaps programs still running. */
void quota_warning_runner_free(struct quota_warning_runner *r);
/* Starts the program of `w` for `user` (or logs the crossing). Returns at
 * once; false when nothing was started (logged, dropped or failed to
 * start: each logged and counted). */
bool quota_warning_run(struct quota_warning_runner *r, const struct quota_warning_config *w,
                       const char *user, const char *home, uint64_t usage, uint64_t limit);
/* The over-flag sync's program (quota_over_status_execute in the bin dir)
 * with USER, HOME, HOST, QUOTA_OVER_FLAG (the stale value) and QUOTA_OVER
 * (yes|no), run and watched like a warning's (not counted in its metric).
 * Without a bin dir or a program the mismatch is only logged. */
bool quota_over_status_run(struct quota_warning_runner *r, const char *user, const char *home,
                           const char *flag, bool over);
/* Programs running now. */
size_t quota_warning_runner_running(const struct quota_warning_runner *r);

#endif
