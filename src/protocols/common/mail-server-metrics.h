/* The metrics IMAP and POP3 both keep, under the same names with the
 * protocol's name in them (docs/logging-and-telemetry.md): connections accepted,
 * command latency, bytes in and out, logins by result. */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_SERVER_METRICS_H
#define PETREL_PROTOCOLS_COMMON_MAIL_SERVER_METRICS_H

#include "core/metrics.h"

#include <time.h>

/* Registers petrel_<proto>_connections_total, _command_seconds (by command
 * and result), _bytes_total (by direction) and _logins_total (by result);
 * `name` is the protocol as the help texts write it ("IMAP"). */
void mail_server_metrics_register(struct metrics_registry *reg, const char *proto, const char *name,
                                  struct metric_series **connections_total,
                                  struct metric_family **command_seconds,
                                  struct metric_series **bytes_in, struct metric_series **bytes_out,
                                  struct metric_family **logins);
/* Observes one command in _command_seconds: `command` ("FETCH") and
 * `result` ("ok"), timed from `started` (CLOCK_MONOTONIC) to now. */
void mail_server_metrics_command_done(struct metric_family *command_seconds, const char *command,
                                      const char *result, const struct timespec *started);

#endif
