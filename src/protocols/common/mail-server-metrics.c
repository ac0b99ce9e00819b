/* The metrics IMAP and POP3 share (mail-server-metrics.h). */
#include "protocols/common/mail-server-metrics.h"

#include <stdarg.h>
#include <stdio.h>

struct names {
    char metric[96];
    char help[128];
};

/* "petrel_<proto>_<suffix>", and the help text. */
static void names_set(struct names *n, const char *proto, const char *suffix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void names_set(struct names *n, const char *proto, const char *suffix, const char *fmt, ...)
{
    snprintf(n->metric, sizeof(n->metric), "petrel_%s_%s", proto, suffix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->help, sizeof(n->help), fmt, ap);
    va_end(ap);
}

void mail_server_metrics_command_done(struct metric_family *command_seconds, const char *command,
                                      const char *result, const struct timespec *started)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double secs =
        (double)(now.tv_sec - started->tv_sec) + (double)(now.tv_nsec - started->tv_nsec) / 1e9;
    const char *values[] = {command, result};
    metric_observe(metric_series_get(command_seconds, values), secs);
}

void mail_server_metrics_register(struct metrics_registry *reg, const char *proto, const char *name,
                                  struct metric_series **connections_total,
                                  struct metric_family **command_seconds,
                                  struct metric_series **bytes_in, struct metric_series **bytes_out,
                                  struct metric_family **logins)
{
    static const char *const cmd_labels[] = {"command", "result", NULL};
    static const char *const dir_labels[] = {"direction", NULL};
    static const char *const login_labels[] = {"result", NULL};
    struct names n;
    names_set(&n, proto, "connections_total", "%s connections accepted.", name);
    *connections_total = metric_series_get(metrics_counter(reg, n.metric, n.help, NULL), NULL);
    names_set(&n, proto, "command_seconds", "%s commands by name and result, in seconds.", name);
    *command_seconds = metrics_histogram(reg, n.metric, n.help, cmd_labels, metrics_latency_buckets,
                                         metrics_latency_bucket_count);
    names_set(&n, proto, "bytes_total", "Bytes received and sent by the %s server.", name);
    struct metric_family *bytes = metrics_counter(reg, n.metric, n.help, dir_labels);
    const char *in[] = {"in"}, *out[] = {"out"};
    *bytes_in = metric_series_get(bytes, in);
    *bytes_out = metric_series_get(bytes, out);
    names_set(&n, proto, "logins_total", "%s logins by result.", name);
    *logins = metrics_counter(reg, n.metric, n.help, login_labels);
}
