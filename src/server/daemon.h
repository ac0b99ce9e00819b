/* petreld's process lifecycle: load configuration, start telemetry and the
 * configured components on one event loop, drop root, run until SIGTERM or
 * SIGINT, then stop accepting, let in-flight requests finish (bounded by
 * shutdown_timeout) and exit 0. SIGHUP reloads the log levels. */
#ifndef PETREL_SERVER_DAEMON_H
#define PETREL_SERVER_DAEMON_H

#include <stdbool.h>

struct daemon_options {
    const char *config_path;
    const char *const *components; /* from --component; NULL = configuration's */
    bool check_config;             /* validate, print the effective configuration, exit */
};

/* Returns the process exit code: 0 after a clean stop, 1 when start-up
 * fails (port taken, TLS file unreadable, privilege drop refused), 2 for an
 * invalid configuration. */
int daemon_run(const struct daemon_options *opts);

#endif
