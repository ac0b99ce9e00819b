/* Metrics registry with Prometheus text exposition (format 0.0.4).
 * A registry belongs to the process context; components register families at
 * start and keep series pointers for their hot paths. Families and series
 * live until metrics_registry_free(). Names and label names are validated at
 * registration (a bad name is a programming error and fatal). Every call is
 * thread-safe (one lock per registry): loops on other threads (imap workers)
 * update the same series the telemetry endpoint renders. */
#ifndef PETREL_CORE_METRICS_H
#define PETREL_CORE_METRICS_H

#include "core/buf.h"

#include <stddef.h>

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metrics_registry;
struct metric_family;
struct metric_series;

struct metrics_registry *metrics_registry_new(void);
void metrics_registry_free(struct metrics_registry *reg);

/* `labels` is a NULL-terminated list of label names (NULL for none).
 * Registering an existing name with the same type and labels returns the
 * existing family, so two components can share one. */
struct metric_family *metrics_counter(struct metrics_registry *reg, const char *name,
                                      const char *help, const char *const labels[]);
struct metric_family *metrics_gauge(struct metrics_registry *reg, const char *name,
                                    const char *help, const char *const labels[]);
/* `bounds` ascending upper bounds without +Inf (added implicitly); copied. */
struct metric_family *metrics_histogram(struct metrics_registry *reg, const char *name,
                                        const char *help, const char *const labels[],
                                        const double *bounds, size_t bound_count);

/* Finds or creates the series for `values` (one per label, in order). */
struct metric_series *metric_series_get(struct metric_family *fam, const char *const values[]);
/* Counter: adds v (v >= 0). */
void metric_add(struct metric_series *s, double v);
/* Gauge: sets or adds (may be negative). */
void metric_set(struct metric_series *s, double v);
void metric_gauge_add(struct metric_series *s, double v);
/* Histogram: records one observation. */
void metric_observe(struct metric_series *s, double v);
double metric_value(const struct metric_series *s);
/* Histogram: number of observations so far. */
unsigned long long metric_count(const struct metric_series *s);
/* Removes every series of the family (for gauges that show one series at a time). */
void metric_family_reset(struct metric_family *fam);

/* Called before each render so gauges that mirror live state can refresh.
 * A collector runs under the registry's lock, so it must not wait for a
 * lock some thread holds while it updates a metric. */
typedef void (*metrics_collect_fn)(void *ctx);
void metrics_add_collector(struct metrics_registry *reg, metrics_collect_fn fn, void *ctx);
void metrics_remove_collector(struct metrics_registry *reg, metrics_collect_fn fn, void *ctx);

/* Appends the exposition of every family to `out`. */
void metrics_render(struct metrics_registry *reg, struct buf *out);

/* Buckets in seconds from 0.5 ms to 10 s, suited to request latencies. */
extern const double metrics_latency_buckets[];
extern const size_t metrics_latency_bucket_count;

#endif
