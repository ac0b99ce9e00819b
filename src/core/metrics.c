#include "core/metrics.h"

#include "core/xalloc.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double metrics_latency_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,    0.25,  0.5,    1,     2.5,  5,     10};
const size_t metrics_latency_bucket_count =
    sizeof(metrics_latency_buckets) / sizeof(metrics_latency_buckets[0]);

#define SERIES_TABLE_MIN 16

struct metric_series {
    struct metric_family *family;
    uint64_t hash;
    char **values;
    double value; /* counter / gauge; histogram sum */
    unsigned long long count;
    unsigned long long *buckets; /* histogram: per-bucket (not cumulative), last is +Inf */
    struct metric_series *next_in_bucket;
};

struct metric_family {
    pthread_mutex_t *lock; /* the registry's */
    enum metric_type type;
    char *name;
    char *help;
    size_t label_count;
    char **labels;
    size_t bound_count;
    double *bounds;
    /* Insertion order for stable output plus a hash index for lookups. */
    struct metric_series **series;
    size_t series_count;
    size_t series_cap;
    struct metric_series **table;
    size_t table_size;
};

struct collector {
    metrics_collect_fn fn;
    void *ctx;
};

struct metrics_registry {
    /* Threads with loops of their own (imap workers) share the registry:
     * one recursive lock guards families, series and values, so a
     * collector may set gauges while metrics_render() holds it. */
    pthread_mutex_t lock;
    struct metric_family **families;
    size_t family_count;
    size_t family_cap;
    struct collector *collectors;
    size_t collector_count;
    size_t collector_cap;
};

struct metrics_registry *metrics_registry_new(void)
{
    struct metrics_registry *reg = xcalloc(1, sizeof(struct metrics_registry));
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&reg->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    return reg;
}

static void series_free(struct metric_series *s, size_t label_count)
{
    for (size_t i = 0; i < label_count; i++)
        free(s->values[i]);
    free(s->values);
    free(s->buckets);
    free(s);
}

static void family_clear(struct metric_family *fam)
{
    for (size_t i = 0; i < fam->series_count; i++)
        series_free(fam->series[i], fam->label_count);
    fam->series_count = 0;
    memset(fam->table, 0, fam->table_size * sizeof(*fam->table));
}

void metric_family_reset(struct metric_family *fam)
{
    pthread_mutex_lock(fam->lock);
    family_clear(fam);
    pthread_mutex_unlock(fam->lock);
}

void metrics_registry_free(struct metrics_registry *reg)
{
    if (reg == NULL)
        return;
    for (size_t f = 0; f < reg->family_count; f++) {
        struct metric_family *fam = reg->families[f];
        family_clear(fam);
        free(fam->series);
        free(fam->table);
        for (size_t i = 0; i < fam->label_count; i++)
            free(fam->labels[i]);
        free(fam->labels);
        free(fam->bounds);
        free(fam->name);
        free(fam->help);
        free(fam);
    }
    free(reg->families);
    free(reg->collectors);
    pthread_mutex_destroy(&reg->lock);
    free(reg);
}

static bool valid_name(const char *name, bool allow_colon)
{
    if (name == NULL || *name == '\0')
        return false;
    for (const char *p = name; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (allow_colon && c == ':') || (p != name && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

static bool same_labels(const struct metric_family *fam, const char *const labels[])
{
    size_t n = 0;
    while (labels != NULL && labels[n] != NULL)
        n++;
    if (n != fam->label_count)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(fam->labels[i], labels[i]) != 0)
            return false;
    }
    return true;
}

static struct metric_family *family_find_or_add(struct metrics_registry *reg, enum metric_type type,
                                                const char *name, const char *help,
                                                const char *const labels[])
{
    if (!valid_name(name, true))
        petrel_fatal("invalid metric name '%s'", name);
    for (size_t f = 0; f < reg->family_count; f++) {
        struct metric_family *fam = reg->families[f];
        if (strcmp(fam->name, name) == 0) {
            if (fam->type != type || !same_labels(fam, labels))
                petrel_fatal("metric '%s' registered twice with different shape", name);
            return fam;
        }
    }
    struct metric_family *fam = xcalloc(1, sizeof(*fam));
    fam->lock = &reg->lock;
    fam->type = type;
    fam->name = xstrdup(name);
    fam->help = xstrdup(help != NULL ? help : "");
    while (labels != NULL && labels[fam->label_count] != NULL)
        fam->label_count++;
    fam->labels = xcalloc(fam->label_count + 1, sizeof(char *));
    for (size_t i = 0; i < fam->label_count; i++) {
        if (!valid_name(labels[i], false) || strncmp(labels[i], "__", 2) == 0 ||
            (type == METRIC_HISTOGRAM && strcmp(labels[i], "le") == 0))
            petrel_fatal("invalid label name '%s' on metric '%s'", labels[i], name);
        fam->labels[i] = xstrdup(labels[i]);
    }
    fam->table_size = SERIES_TABLE_MIN;
    fam->table = xcalloc(fam->table_size, sizeof(*fam->table));
    reg->families =
        xgrow(reg->families, &reg->family_cap, reg->family_count + 1, sizeof(*reg->families));
    reg->families[reg->family_count++] = fam;
    return fam;
}

static struct metric_family *family_new(struct metrics_registry *reg, enum metric_type type,
                                        const char *name, const char *help,
                                        const char *const labels[])
{
    pthread_mutex_lock(&reg->lock);
    struct metric_family *fam = family_find_or_add(reg, type, name, help, labels);
    pthread_mutex_unlock(&reg->lock);
    return fam;
}

struct metric_family *metrics_counter(struct metrics_registry *reg, const char *name,
                                      const char *help, const char *const labels[])
{
    return family_new(reg, METRIC_COUNTER, name, help, labels);
}

struct metric_family *metrics_gauge(struct metrics_registry *reg, const char *name,
                                    const char *help, const char *const labels[])
{
    return family_new(reg, METRIC_GAUGE, name, help, labels);
}

struct metric_family *metrics_histogram(struct metrics_registry *reg, const char *name,
                                        const char *help, const char *const labels[],
                                        const double *bounds, size_t bound_count)
{
    pthread_mutex_lock(&reg->lock);
    struct metric_family *fam = family_find_or_add(reg, METRIC_HISTOGRAM, name, help, labels);
    if (fam->bounds != NULL) {
        pthread_mutex_unlock(&reg->lock);
        return fam;
    }
    if (bound_count == 0)
        petrel_fatal("histogram '%s' needs buckets", name);
    for (size_t i = 1; i < bound_count; i++) {
        if (!(bounds[i] > bounds[i - 1]))
            petrel_fatal("histogram '%s' buckets not ascending", name);
    }
    fam->bound_count = bound_count;
    fam->bounds = xmalloc(bound_count * sizeof(double));
    memcpy(fam->bounds, bounds, bound_count * sizeof(double));
    pthread_mutex_unlock(&reg->lock);
    return fam;
}

static uint64_t hash_values(const char *const values[], size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        for (const unsigned char *p = (const unsigned char *)values[i]; *p != '\0'; p++) {
            h ^= *p;
            h *= 1099511628211ULL;
        }
        h ^= 0xff; /* separator so ("ab","c") differs from ("a","bc") */
        h *= 1099511628211ULL;
    }
    return h;
}

static void table_insert(struct metric_family *fam, struct metric_series *s)
{
    size_t slot = (size_t)(s->hash & (fam->table_size - 1));
    s->next_in_bucket = fam->table[slot];
    fam->table[slot] = s;
}

static void table_grow(struct metric_family *fam)
{
    free(fam->table);
    fam->table_size *= 2;
    fam->table = xcalloc(fam->table_size, sizeof(*fam->table));
    for (size_t i = 0; i < fam->series_count; i++)
        table_insert(fam, fam->series[i]);
}

static struct metric_series *series_find_or_add(struct metric_family *fam,
                                                const char *const values[])
{
    uint64_t h = hash_values(values, fam->label_count);
    for (struct metric_series *s = fam->table[h & (fam->table_size - 1)]; s != NULL;
         s = s->next_in_bucket) {
        if (s->hash != h)
            continue;
        bool same = true;
        for (size_t i = 0; i < fam->label_count && same; i++)
            same = strcmp(s->values[i], values[i]) == 0;
        if (same)
            return s;
    }
    struct metric_series *s = xcalloc(1, sizeof(*s));
    s->family = fam;
    s->hash = h;
    s->values = xcalloc(fam->label_count + 1, sizeof(char *));
    for (size_t i = 0; i < fam->label_count; i++)
        s->values[i] = xstrdup(values[i]);
    if (fam->type == METRIC_HISTOGRAM)
        s->buckets = xcalloc(fam->bound_count + 1, sizeof(*s->buckets));
    fam->series = xgrow(fam->series, &fam->series_cap, fam->series_count + 1, sizeof(*fam->series));
    fam->series[fam->series_count++] = s;
    if (fam->series_count > fam->table_size)
        table_grow(fam);
    else
        table_insert(fam, s);
    return s;
}

struct metric_series *metric_series_get(struct metric_family *fam, const char *const values[])
{
    pthread_mutex_lock(fam->lock);
    struct metric_series *s = series_find_or_add(fam, values);
    pthread_mutex_unlock(fam->lock);
    return s;
}

void metric_add(struct metric_series *s, double v)
{
    if (!(v > 0))
        return;
    pthread_mutex_lock(s->family->lock);
    s->value += v;
    pthread_mutex_unlock(s->family->lock);
}

void metric_set(struct metric_series *s, double v)
{
    pthread_mutex_lock(s->family->lock);
    s->value = v;
    pthread_mutex_unlock(s->family->lock);
}

void metric_gauge_add(struct metric_series *s, double v)
{
    pthread_mutex_lock(s->family->lock);
    s->value += v;
    pthread_mutex_unlock(s->family->lock);
}

void metric_observe(struct metric_series *s, double v)
{
    const struct metric_family *fam = s->family;
    size_t i = 0;
    while (i < fam->bound_count && v > fam->bounds[i])
        i++;
    pthread_mutex_lock(fam->lock);
    s->buckets[i]++;
    s->count++;
    s->value += v;
    pthread_mutex_unlock(fam->lock);
}

double metric_value(const struct metric_series *s)
{
    pthread_mutex_lock(s->family->lock);
    double v = s->value;
    pthread_mutex_unlock(s->family->lock);
    return v;
}

unsigned long long metric_count(const struct metric_series *s)
{
    pthread_mutex_lock(s->family->lock);
    unsigned long long n = s->count;
    pthread_mutex_unlock(s->family->lock);
    return n;
}

void metrics_add_collector(struct metrics_registry *reg, metrics_collect_fn fn, void *ctx)
{
    pthread_mutex_lock(&reg->lock);
    reg->collectors = xgrow(reg->collectors, &reg->collector_cap, reg->collector_count + 1,
                            sizeof(*reg->collectors));
    reg->collectors[reg->collector_count].fn = fn;
    reg->collectors[reg->collector_count].ctx = ctx;
    reg->collector_count++;
    pthread_mutex_unlock(&reg->lock);
}

void metrics_remove_collector(struct metrics_registry *reg, metrics_collect_fn fn, void *ctx)
{
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->collector_count; i++) {
        if (reg->collectors[i].fn == fn && reg->collectors[i].ctx == ctx) {
            memmove(&reg->collectors[i], &reg->collectors[i + 1],
                    (reg->collector_count - i - 1) * sizeof(*reg->collectors));
            reg->collector_count--;
            break;
        }
    }
    pthread_mutex_unlock(&reg->lock);
}

static void append_escaped(struct buf *out, const char *s, bool is_label)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            buf_append(out, "\\\\", 2);
        else if (*s == '\n')
            buf_append(out, "\\n", 2);
        else if (is_label && *s == '"')
            buf_append(out, "\\\"", 2);
        else
            buf_append_char(out, *s);
    }
}

static void append_number(struct buf *out, double v)
{
    if (isnan(v))
        buf_append_str(out, "NaN");
    else if (isinf(v))
        buf_append_str(out, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        buf_printf(out, "%.0f", v);
    else {
        /* The shortest text that reads back as the same double. */
        char text[40];
        for (int precision = 6; precision <= 17; precision++) {
            snprintf(text, sizeof(text), "%.*g", precision, v);
            if (strtod(text, NULL) == v)
                break;
        }
        buf_append_str(out, text);
    }
}

static void append_labels(struct buf *out, const struct metric_family *fam,
                          const struct metric_series *s, const char *le)
{
    if (fam->label_count == 0 && le == NULL)
        return;
    buf_append_char(out, '{');
    for (size_t i = 0; i < fam->label_count; i++) {
        if (i > 0)
            buf_append_char(out, ',');
        buf_append_str(out, fam->labels[i]);
        buf_append(out, "=\"", 2);
        append_escaped(out, s->values[i], true);
        buf_append_char(out, '"');
    }
    if (le != NULL) {
        if (fam->label_count > 0)
            buf_append_char(out, ',');
        buf_printf(out, "le=\"%s\"", le);
    }
    buf_append_char(out, '}');
}

static void render_family(struct buf *out, const struct metric_family *fam)
{
    static const char *type_names[] = {"counter", "gauge", "histogram"};
    buf_printf(out, "# HELP %s ", fam->name);
    append_escaped(out, fam->help, false);
    buf_printf(out, "\n# TYPE %s %s\n", fam->name, type_names[fam->type]);
    for (size_t i = 0; i < fam->series_count; i++) {
        const struct metric_series *s = fam->series[i];
        if (fam->type != METRIC_HISTOGRAM) {
            buf_append_str(out, fam->name);
            append_labels(out, fam, s, NULL);
            buf_append_char(out, ' ');
            append_number(out, s->value);
            buf_append_char(out, '\n');
            continue;
        }
        unsigned long long cumulative = 0;
        for (size_t b = 0; b <= fam->bound_count; b++) {
            char le[48];
            if (b == fam->bound_count) {
                snprintf(le, sizeof(le), "+Inf");
            } else {
                struct buf tmp = {0};
                append_number(&tmp, fam->bounds[b]);
                snprintf(le, sizeof(le), "%s", buf_cstr(&tmp));
                buf_free(&tmp);
            }
            cumulative += s->buckets[b];
            buf_printf(out, "%s_bucket", fam->name);
            append_labels(out, fam, s, le);
            buf_printf(out, " %llu\n", cumulative);
        }
        buf_printf(out, "%s_sum", fam->name);
        append_labels(out, fam, s, NULL);
        buf_append_char(out, ' ');
        append_number(out, s->value);
        buf_printf(out, "\n%s_count", fam->name);
        append_labels(out, fam, s, NULL);
        buf_printf(out, " %llu\n", s->count);
    }
}

void metrics_render(struct metrics_registry *reg, struct buf *out)
{
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->collector_count; i++)
        reg->collectors[i].fn(reg->collectors[i].ctx);
    for (size_t f = 0; f < reg->family_count; f++)
        render_family(out, reg->families[f]);
    pthread_mutex_unlock(&reg->lock);
}
