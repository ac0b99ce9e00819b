/* Unit tests for core/metrics.h: the Prometheus text exposition, byte for byte. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *render(struct metrics_registry *reg)
{
    struct buf out = {0};
    metrics_render(reg, &out);
    return buf_steal(&out);
}

static void assert_renders(struct metrics_registry *reg, const char *expected)
{
    char *text = render(reg);
    if (strcmp(text, expected) != 0)
        fail_msg("exposition differs.\n--- got:\n%s--- expected:\n%s", text, expected);
    free(text);
}

static size_t count_occurrences(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_empty_registry_renders_nothing(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    assert_renders(reg, "");
    metrics_registry_free(reg);
}

static void test_counter_without_labels(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    struct metric_family *fam = metrics_counter(reg, "petrel_events_total", "Events seen.", NULL);
    /* A family with no series yet shows only its HELP and TYPE lines. */
    assert_renders(reg, "# HELP petrel_events_total Events seen.\n"
                        "# TYPE petrel_events_total counter\n");
    struct metric_series *s = metric_series_get(fam, NULL);
    metric_add(s, 1);
    metric_add(s, 2.5);
    metric_add(s, -4); /* counters never go down */
    assert_true(metric_value(s) == 3.5);
    assert_renders(reg, "# HELP petrel_events_total Events seen.\n"
                        "# TYPE petrel_events_total counter\n"
                        "petrel_events_total 3.5\n");
    metrics_registry_free(reg);
}

static void test_counter_with_labels_in_insertion_order(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const char *const labels[] = {"method", "code", NULL};
    struct metric_family *fam =
        metrics_counter(reg, "petrel_http_requests_total", "HTTP requests.", labels);
    const char *const a[] = {"GET", "200", NULL};
    const char *const b[] = {"POST", "404", NULL};
    metric_add(metric_series_get(fam, a), 3);
    metric_add(metric_series_get(fam, b), 1);
    metric_add(metric_series_get(fam, a), 1);
    assert_ptr_equal(metric_series_get(fam, a), metric_series_get(fam, a));
    assert_ptr_not_equal(metric_series_get(fam, a), metric_series_get(fam, b));
    assert_renders(reg, "# HELP petrel_http_requests_total HTTP requests.\n"
                        "# TYPE petrel_http_requests_total counter\n"
                        "petrel_http_requests_total{method=\"GET\",code=\"200\"} 4\n"
                        "petrel_http_requests_total{method=\"POST\",code=\"404\"} 1\n");
    metrics_registry_free(reg);
}

static void test_label_values_with_separator_do_not_collide(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const char *const labels[] = {"a", "b", NULL};
    struct metric_family *fam = metrics_counter(reg, "petrel_pairs_total", "Pairs.", labels);
    const char *const x[] = {"ab", "c"};
    const char *const y[] = {"a", "bc"};
    struct metric_series *sx = metric_series_get(fam, x);
    struct metric_series *sy = metric_series_get(fam, y);
    assert_ptr_not_equal(sx, sy);
    metric_add(sx, 1);
    metric_add(sy, 2);
    assert_true(metric_value(metric_series_get(fam, x)) == 1);
    assert_true(metric_value(metric_series_get(fam, y)) == 2);
    metrics_registry_free(reg);
}

static void test_gauge_set_and_add(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const char *const labels[] = {"pool", NULL};
    struct metric_family *fam =
        metrics_gauge(reg, "petrel_connections", "Open connections.", labels);
    const char *const v[] = {"imap"};
    struct metric_series *s = metric_series_get(fam, v);
    metric_set(s, 10);
    metric_gauge_add(s, -12.25);
    assert_true(metric_value(s) == -2.25);
    assert_renders(reg, "# HELP petrel_connections Open connections.\n"
                        "# TYPE petrel_connections gauge\n"
                        "petrel_connections{pool=\"imap\"} -2.25\n");
    metric_set(s, 1e20);
    metric_set(metric_series_get(fam, (const char *const[]){"inf"}), INFINITY);
    metric_set(metric_series_get(fam, (const char *const[]){"nan"}), NAN);
    metric_set(metric_series_get(fam, (const char *const[]){"tiny"}), 0.1);
    assert_renders(reg, "# HELP petrel_connections Open connections.\n"
                        "# TYPE petrel_connections gauge\n"
                        "petrel_connections{pool=\"imap\"} 1e+20\n"
                        "petrel_connections{pool=\"inf\"} +Inf\n"
                        "petrel_connections{pool=\"nan\"} NaN\n"
                        "petrel_connections{pool=\"tiny\"} 0.1\n");
    metrics_registry_free(reg);
}

static void test_label_values_escape_backslash_quote_and_newline(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const char *const labels[] = {"path", NULL};
    struct metric_family *fam = metrics_gauge(reg, "petrel_weird", "Weird labels.", labels);
    const char *const v[] = {"C:\\dir \"quoted\"\nnext"};
    metric_set(metric_series_get(fam, v), 1);
    assert_renders(reg, "# HELP petrel_weird Weird labels.\n"
                        "# TYPE petrel_weird gauge\n"
                        "petrel_weird{path=\"C:\\\\dir \\\"quoted\\\"\\nnext\"} 1\n");
    metrics_registry_free(reg);
}

static void test_help_escapes_backslash_and_newline_but_not_quote(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    metrics_counter(reg, "petrel_help_total", "Line one\nwith \\ and \"quotes\".", NULL);
    metrics_gauge(reg, "petrel_nohelp", NULL, NULL);
    assert_renders(reg, "# HELP petrel_help_total Line one\\nwith \\\\ and \"quotes\".\n"
                        "# TYPE petrel_help_total counter\n"
                        "# HELP petrel_nohelp \n"
                        "# TYPE petrel_nohelp gauge\n");
    metrics_registry_free(reg);
}

static void test_histogram_buckets_are_cumulative_with_inf_sum_and_count(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const double bounds[] = {0.005, 0.1, 1, 2.5};
    const char *const labels[] = {"route", NULL};
    struct metric_family *fam =
        metrics_histogram(reg, "petrel_request_seconds", "Request latency.", labels, bounds, 4);
    const char *const v[] = {"/api"};
    struct metric_series *s = metric_series_get(fam, v);
    metric_observe(s, 0.001); /* <= 0.005 */
    metric_observe(s, 0.005); /* on a bound: that bucket (le is inclusive) */
    metric_observe(s, 0.5);   /* <= 1 */
    metric_observe(s, 2.5);   /* <= 2.5 */
    metric_observe(s, 30);    /* +Inf only */
    assert_int_equal(metric_count(s), 5);
    assert_true(fabs(metric_value(s) - 33.006) < 1e-9);
    char *text = render(reg);
    const char *expected_head = "# HELP petrel_request_seconds Request latency.\n"
                                "# TYPE petrel_request_seconds histogram\n"
                                "petrel_request_seconds_bucket{route=\"/api\",le=\"0.005\"} 2\n"
                                "petrel_request_seconds_bucket{route=\"/api\",le=\"0.1\"} 2\n"
                                "petrel_request_seconds_bucket{route=\"/api\",le=\"1\"} 3\n"
                                "petrel_request_seconds_bucket{route=\"/api\",le=\"2.5\"} 4\n"
                                "petrel_request_seconds_bucket{route=\"/api\",le=\"+Inf\"} 5\n"
                                "petrel_request_seconds_sum{route=\"/api\"} ";
    if (strncmp(text, expected_head, strlen(expected_head)) != 0)
        fail_msg("got:\n%s", text);
    const char *sum = text + strlen(expected_head);
    char *end;
    double sum_value = strtod(sum, &end);
    assert_true(fabs(sum_value - 33.006) < 1e-9);
    assert_string_equal(end, "\npetrel_request_seconds_count{route=\"/api\"} 5\n");
    free(text);
    metrics_registry_free(reg);
}

static void test_histogram_without_labels_and_without_observations(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const double bounds[] = {1, 10};
    struct metric_family *fam = metrics_histogram(reg, "petrel_sizes", "Sizes.", NULL, bounds, 2);
    metric_series_get(fam, NULL);
    assert_renders(reg, "# HELP petrel_sizes Sizes.\n"
                        "# TYPE petrel_sizes histogram\n"
                        "petrel_sizes_bucket{le=\"1\"} 0\n"
                        "petrel_sizes_bucket{le=\"10\"} 0\n"
                        "petrel_sizes_bucket{le=\"+Inf\"} 0\n"
                        "petrel_sizes_sum 0\n"
                        "petrel_sizes_count 0\n");
    metric_observe(metric_series_get(fam, NULL), 10);
    metric_observe(metric_series_get(fam, NULL), 11);
    assert_renders(reg, "# HELP petrel_sizes Sizes.\n"
                        "# TYPE petrel_sizes histogram\n"
                        "petrel_sizes_bucket{le=\"1\"} 0\n"
                        "petrel_sizes_bucket{le=\"10\"} 1\n"
                        "petrel_sizes_bucket{le=\"+Inf\"} 2\n"
                        "petrel_sizes_sum 21\n"
                        "petrel_sizes_count 2\n");
    metrics_registry_free(reg);
}

static void test_latency_buckets_render_every_bound(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    struct metric_family *fam =
        metrics_histogram(reg, "petrel_latency_seconds", "Latency.", NULL, metrics_latency_buckets,
                          metrics_latency_bucket_count);
    metric_observe(metric_series_get(fam, NULL), 0.0004);
    char *text = render(reg);
    assert_int_equal(count_occurrences(text, "petrel_latency_seconds_bucket{"),
                     metrics_latency_bucket_count + 1);
    assert_non_null(strstr(text, "petrel_latency_seconds_bucket{le=\"0.0005\"} 1\n"));
    assert_non_null(strstr(text, "petrel_latency_seconds_bucket{le=\"0.0025\"} 1\n"));
    assert_non_null(strstr(text, "petrel_latency_seconds_bucket{le=\"10\"} 1\n"));
    assert_non_null(strstr(text, "petrel_latency_seconds_bucket{le=\"+Inf\"} 1\n"));
    assert_non_null(strstr(text, "petrel_latency_seconds_sum 0.0004\n"));
    assert_non_null(strstr(text, "petrel_latency_seconds_count 1\n"));
    free(text);
    metrics_registry_free(reg);
}

static void test_same_name_registration_returns_the_same_family(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const char *const labels[] = {"x", NULL};
    const char *const labels_copy[] = {"x", NULL};
    struct metric_family *a = metrics_counter(reg, "petrel_shared_total", "Shared.", labels);
    struct metric_family *b =
        metrics_counter(reg, "petrel_shared_total", "Other help.", labels_copy);
    assert_ptr_equal(a, b);
    const char *const v[] = {"1"};
    metric_add(metric_series_get(a, v), 1);
    metric_add(metric_series_get(b, v), 1);
    const double bounds[] = {1};
    struct metric_family *h1 =
        metrics_histogram(reg, "petrel_shared_seconds", "H.", NULL, bounds, 1);
    struct metric_family *h2 =
        metrics_histogram(reg, "petrel_shared_seconds", "H.", NULL, bounds, 1);
    assert_ptr_equal(h1, h2);
    /* Rendered once, with the first help text. */
    assert_renders(reg, "# HELP petrel_shared_total Shared.\n"
                        "# TYPE petrel_shared_total counter\n"
                        "petrel_shared_total{x=\"1\"} 2\n"
                        "# HELP petrel_shared_seconds H.\n"
                        "# TYPE petrel_shared_seconds histogram\n");
    metrics_registry_free(reg);
}

static void test_family_reset_removes_every_series(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    const char *const labels[] = {"level", NULL};
    struct metric_family *fam = metrics_gauge(reg, "petrel_log_level", "Level.", labels);
    metric_set(metric_series_get(fam, (const char *const[]){"info"}), 7);
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof(name), "l%d", i);
        metric_set(metric_series_get(fam, (const char *const[]){name}), i);
    }
    metric_family_reset(fam);
    assert_renders(reg, "# HELP petrel_log_level Level.\n"
                        "# TYPE petrel_log_level gauge\n");
    /* Series can be created again after a reset; old ones are gone. */
    struct metric_series *s = metric_series_get(fam, (const char *const[]){"debug"});
    metric_set(s, -4);
    struct metric_series *info = metric_series_get(fam, (const char *const[]){"info"});
    assert_true(metric_value(info) == 0);
    metric_family_reset(fam);
    metric_set(metric_series_get(fam, (const char *const[]){"warn"}), 4);
    assert_renders(reg, "# HELP petrel_log_level Level.\n"
                        "# TYPE petrel_log_level gauge\n"
                        "petrel_log_level{level=\"warn\"} 4\n");
    metrics_registry_free(reg);
}

struct collect_state {
    struct metric_series *series;
    int calls;
};

static void collect(void *ctx)
{
    struct collect_state *cs = ctx;
    cs->calls++;
    metric_set(cs->series, cs->calls * 10);
}

static void test_collectors_run_before_each_render(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    struct metric_family *fam = metrics_gauge(reg, "petrel_live", "Live value.", NULL);
    struct collect_state cs = {metric_series_get(fam, NULL), 0};
    struct collect_state other = {metric_series_get(fam, NULL), 100};
    metrics_add_collector(reg, collect, &cs);
    assert_renders(reg, "# HELP petrel_live Live value.\n"
                        "# TYPE petrel_live gauge\n"
                        "petrel_live 10\n");
    assert_renders(reg, "# HELP petrel_live Live value.\n"
                        "# TYPE petrel_live gauge\n"
                        "petrel_live 20\n");
    assert_int_equal(cs.calls, 2);

    /* Removing matches function and context. */
    metrics_add_collector(reg, collect, &other);
    metrics_remove_collector(reg, collect, &cs);
    assert_renders(reg, "# HELP petrel_live Live value.\n"
                        "# TYPE petrel_live gauge\n"
                        "petrel_live 1010\n");
    assert_int_equal(cs.calls, 2);
    metrics_remove_collector(reg, collect, &cs); /* absent: no effect */
    metrics_remove_collector(reg, collect, &other);
    assert_renders(reg, "# HELP petrel_live Live value.\n"
                        "# TYPE petrel_live gauge\n"
                        "petrel_live 1010\n");
    assert_int_equal(other.calls, 101);
    metrics_registry_free(reg);
}

static void test_many_series_are_all_rendered_once(void **state)
{
    enum { N = 2000 };
    struct metrics_registry *reg = metrics_registry_new();
    const char *const labels[] = {"user", NULL};
    struct metric_family *fam = metrics_counter(reg, "petrel_user_logins_total", "Logins.", labels);
    struct metric_series **kept = calloc(N, sizeof(*kept));
    assert_non_null(kept);
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof(name), "user%d", i);
        kept[i] = metric_series_get(fam, (const char *const[]){name});
        metric_add(kept[i], i);
    }
    /* Lookups after the table grew find the same series. */
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof(name), "user%d", i);
        struct metric_series *s = metric_series_get(fam, (const char *const[]){name});
        assert_ptr_equal(s, kept[i]);
        metric_add(s, 1);
    }
    char *text = render(reg);
    assert_int_equal(count_occurrences(text, "\npetrel_user_logins_total{"), N);
    for (int i = 0; i < N; i++) {
        char line[80];
        snprintf(line, sizeof(line), "\npetrel_user_logins_total{user=\"user%d\"} %d\n", i, i + 1);
        if (count_occurrences(text, line) != 1)
            fail_msg("series user%d rendered %zu times", i, count_occurrences(text, line));
    }
    free(text);
    free(kept);
    metrics_registry_free(reg);
}

static void test_families_render_in_registration_order(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    metric_add(metric_series_get(metrics_counter(reg, "petrel_b_total", "B.", NULL), NULL), 1);
    metric_set(metric_series_get(metrics_gauge(reg, "petrel_a", "A.", NULL), NULL), 2);
    metric_add(metric_series_get(metrics_counter(reg, "petrel_ns:c_total", "C.", NULL), NULL), 3);
    assert_renders(reg, "# HELP petrel_b_total B.\n"
                        "# TYPE petrel_b_total counter\n"
                        "petrel_b_total 1\n"
                        "# HELP petrel_a A.\n"
                        "# TYPE petrel_a gauge\n"
                        "petrel_a 2\n"
                        "# HELP petrel_ns:c_total C.\n"
                        "# TYPE petrel_ns:c_total counter\n"
                        "petrel_ns:c_total 3\n");
    metrics_registry_free(reg);
}

static void test_render_appends_to_existing_buffer(void **state)
{
    struct metrics_registry *reg = metrics_registry_new();
    metrics_gauge(reg, "petrel_x", "X.", NULL);
    struct buf out = {0};
    buf_append_str(&out, "prefix\n");
    metrics_render(reg, &out);
    assert_string_equal(buf_cstr(&out), "prefix\n# HELP petrel_x X.\n# TYPE petrel_x gauge\n");
    buf_free(&out);
    metrics_registry_free(reg);
}

/* Loops on other threads (imap workers) update the series the telemetry
 * endpoint renders: no update may be lost, and series created from several
 * threads at once are each created once. */
struct hammer {
    struct metrics_registry *reg;
    struct metric_series *counter;
    struct metric_series *hist;
    struct metric_family *labelled;
    int id;
};

#define HAMMER_THREADS 4
#define HAMMER_ROUNDS 20000

static void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    for (int i = 0; i < HAMMER_ROUNDS; i++) {
        metric_add(h->counter, 1);
        metric_observe(h->hist, 0.002);
        char label[16];
        snprintf(label, sizeof(label), "v%d", i % 8);
        const char *values[] = {label};
        metric_add(metric_series_get(h->labelled, values), 1);
        if (i % 5000 == 0) {
            /* a family registered at run time, as a worker's storage does */
            metrics_counter(h->reg, "petrel_late_total", "Late.", NULL);
            struct buf out = {0};
            metrics_render(h->reg, &out);
            buf_free(&out);
        }
    }
    return NULL;
}

static void test_updates_from_many_threads_are_all_counted(void **state)
{
    (void)state;
    struct metrics_registry *reg = metrics_registry_new();
    static const char *const labels[] = {"value", NULL};
    struct metric_series *counter =
        metric_series_get(metrics_counter(reg, "petrel_c_total", "C.", NULL), NULL);
    struct metric_series *hist =
        metric_series_get(metrics_histogram(reg, "petrel_h_seconds", "H.", NULL,
                                            metrics_latency_buckets, metrics_latency_bucket_count),
                          NULL);
    struct metric_family *labelled = metrics_counter(reg, "petrel_l_total", "L.", labels);
    pthread_t threads[HAMMER_THREADS];
    struct hammer h[HAMMER_THREADS];
    for (int t = 0; t < HAMMER_THREADS; t++) {
        h[t] = (struct hammer){reg, counter, hist, labelled, t};
        assert_int_equal(pthread_create(&threads[t], NULL, hammer_run, &h[t]), 0);
    }
    for (int t = 0; t < HAMMER_THREADS; t++)
        pthread_join(threads[t], NULL);
    assert_true(metric_value(counter) == (double)HAMMER_THREADS * HAMMER_ROUNDS);
    assert_int_equal(metric_count(hist), (unsigned long long)HAMMER_THREADS * HAMMER_ROUNDS);
    double total = 0;
    for (int v = 0; v < 8; v++) {
        char label[16];
        snprintf(label, sizeof(label), "v%d", v);
        const char *values[] = {label};
        total += metric_value(metric_series_get(labelled, values));
    }
    assert_true(total == (double)HAMMER_THREADS * HAMMER_ROUNDS);
    struct buf out = {0};
    metrics_render(reg, &out);
    /* eight series, each rendered once */
    const char *p = buf_cstr(&out);
    size_t series = 0;
    while ((p = strstr(p, "petrel_l_total{")) != NULL) {
        series++;
        p++;
    }
    assert_int_equal(series, 8);
    buf_free(&out);
    metrics_registry_free(reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_registry_renders_nothing),
        cmocka_unit_test(test_counter_without_labels),
        cmocka_unit_test(test_counter_with_labels_in_insertion_order),
        cmocka_unit_test(test_label_values_with_separator_do_not_collide),
        cmocka_unit_test(test_gauge_set_and_add),
        cmocka_unit_test(test_label_values_escape_backslash_quote_and_newline),
        cmocka_unit_test(test_help_escapes_backslash_and_newline_but_not_quote),
        cmocka_unit_test(test_histogram_buckets_are_cumulative_with_inf_sum_and_count),
        cmocka_unit_test(test_histogram_without_labels_and_without_observations),
        cmocka_unit_test(test_latency_buckets_render_every_bound),
        cmocka_unit_test(test_same_name_registration_returns_the_same_family),
        cmocka_unit_test(test_family_reset_removes_every_series),
        cmocka_unit_test(test_collectors_run_before_each_render),
        cmocka_unit_test(test_many_series_are_all_rendered_once),
        cmocka_unit_test(test_families_render_in_registration_order),
        cmocka_unit_test(test_render_appends_to_existing_buffer),
        cmocka_unit_test(test_updates_from_many_threads_are_all_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
