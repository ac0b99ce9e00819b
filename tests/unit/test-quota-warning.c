/* Unit tests for quota warnings (storage/quota/quota-warning.h): which
 * rules a change of usage crosses (once per crossing, over and under), and
 * the runner with real programs on a real libevent loop: the exact
 * environment of document 3, no shell between (the program is executed
 * directly), a program killed at the timeout while the loop keeps running,
 * a failing and a missing program, and the log-only mode without a bin dir. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/metrics.h"
#include "core/xalloc.h"
#include "server/config.h"
#include "storage/quota/quota-warning.h"

#include <dirent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static struct petrel_config *config_of(const char *text)
{
    struct petrel_error err = {0};
    struct petrel_config *cfg = config_parse("petrel.yaml", text, strlen(text), &err);
    if (cfg == NULL)
        fail_msg("config refused: %s", err.message);
    return cfg;
}

static void test_crossings(void **state)
{
    (void)state;
    struct petrel_config *pc = config_of("quota:\n  quota_warnings:\n"
                                         "    - {quota_warning_name: s80, quota_warning_resource: "
                                         "storage, quota_warning_percentage: 80}\n"
                                         "    - {quota_warning_name: s80u, quota_warning_resource: "
                                         "storage, quota_warning_threshold: under, "
                                         "quota_warning_percentage: 80}\n"
                                         "    - {quota_warning_name: m100, quota_warning_resource: "
                                         "message, quota_warning_percentage: 100}\n");
    const struct quota_config *cfg = &pc->quota;
    const struct quota_warning_config *out[8];
    struct quota_limits lim = {.storage = 1000, .messages = 10};
    struct quota_usage a = {700, 5}, b = {800, 5}, c = {900, 10}, d = {799, 9};
    /* 700 -> 800 crosses 80 % upward: the over rule only */
    assert_int_equal(quota_warnings_crossed(cfg, &lim, &a, &b, out), 1);
    assert_string_equal(out[0]->name, "s80");
    /* staying above: nothing, however often */
    assert_int_equal(quota_warnings_crossed(cfg, &lim, &b, &b, out), 0);
    /* 800 -> 900 and 5 -> 10 messages: the message rule */
    assert_int_equal(quota_warnings_crossed(cfg, &lim, &b, &c, out), 1);
    assert_string_equal(out[0]->name, "m100");
    /* back below both: the under rule */
    assert_int_equal(quota_warnings_crossed(cfg, &lim, &c, &d, out), 1);
    assert_string_equal(out[0]->name, "s80u");
    /* unlimited never crosses */
    struct quota_limits none = {0, 0};
    assert_int_equal(quota_warnings_crossed(cfg, &none, &a, &c, out), 0);
    /* no overflow near the top */
    struct quota_limits huge = {.storage = UINT64_MAX, .messages = 0};
    struct quota_usage lo = {0, 0}, hi = {UINT64_MAX, 0};
    assert_int_equal(quota_warnings_crossed(cfg, &huge, &lo, &hi, out), 1);
    config_free(pc);
}

struct fx {
    char dir[256];
    struct event_base *base;
    struct metrics_registry *metrics;
    struct petrel_config *pc;
    struct quota_warning_runner *runner;
    struct event *tick;
    int ticks;
};

static void write_program(const struct fx *fx, const char *name, const char *body)
{
    char *path = xasprintf("%s/bin/%s", fx->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
    free(path);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fx *fx = arg;
    fx->ticks++;
}

static int setup(void **state)
{
    struct fx *fx = xcalloc(1, sizeof(*fx));
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/petrel-quota-warn-XXXXXX");
    if (mkdtemp(fx->dir) == NULL)
        return -1;
    char *bin = xasprintf("%s/bin", fx->dir);
    mkdir(bin, 0755);
    char *yaml = xasprintf("quota:\n  quota_warning_bin_dir: %s\n"
                           "  quota_warning_exec_timeout: 300ms\n"
                           "  quota_warnings:\n"
                           "    - {quota_warning_name: record, quota_warning_resource: storage, "
                           "quota_warning_percentage: 90, quota_warning_execute: record}\n"
                           "    - {quota_warning_name: slow, quota_warning_resource: message, "
                           "quota_warning_threshold: under, quota_warning_percentage: 50, "
                           "quota_warning_execute: slow}\n"
                           "    - {quota_warning_name: fails, quota_warning_resource: storage, "
                           "quota_warning_percentage: 10, quota_warning_execute: fails}\n"
                           "    - {quota_warning_name: missing, quota_warning_resource: storage, "
                           "quota_warning_percentage: 20, quota_warning_execute: missing}\n"
                           "    - {quota_warning_name: logonly, quota_warning_resource: storage, "
                           "quota_warning_percentage: 30}\n",
                           bin);
    fx->pc = config_of(yaml);
    free(yaml);
    free(bin);
    fx->base = event_base_new();
    fx->metrics = metrics_registry_new();
    fx->runner = quota_warning_runner_new(fx->base, &fx->pc->quota, fx->metrics);
    fx->tick = event_new(fx->base, -1, EV_PERSIST, on_tick, fx);
    struct timeval tv = {0, 20000};
    event_add(fx->tick, &tv);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fx *fx = *state;
    quota_warning_runner_free(fx->runner);
    event_free(fx->tick);
    metrics_registry_free(fx->metrics);
    event_base_free(fx->base);
    config_free(fx->pc);
    char *cmd = xasprintf("rm -rf '%s'", fx->dir);
    if (system(cmd) != 0) {
    }
    free(cmd);
    free(fx);
    return 0;
}

/* Runs the loop until no program is running (at most `limit_s`). */
static double run_until_idle(struct fx *fx, double limit_s)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (quota_warning_runner_running(fx->runner) == 0)
            return el;
        if (el > limit_s)
            fail_msg("programs still running after %.1fs", el);
        event_base_loop(fx->base, EVLOOP_ONCE);
    }
}

static double metric_of(struct fx *fx, const char *result)
{
    struct buf out = {0};
    metrics_render(fx->metrics, &out);
    char want[128];
    snprintf(want, sizeof(want), "petrel_quota_warnings_total{result=\"%s\"} ", result);
    const char *p = strstr(buf_cstr(&out), want);
    double v = p != NULL ? atof(p + strlen(want)) : -1;
    buf_free(&out);
    return v;
}

static const struct quota_warning_config *rule(struct fx *fx, const char *name)
{
    for (size_t i = 0; i < fx->pc->quota.warning_count; i++) {
        if (strcmp(fx->pc->quota.warnings[i].name, name) == 0)
            return &fx->pc->quota.warnings[i];
    }
    fail_msg("no rule %s", name);
    return NULL;
}

static void test_runs_with_exact_environment(void **state)
{
    struct fx *fx = *state;
    char *out = xasprintf("%s/env.out", fx->dir);
    /* The shell's own environment as it was executed (/proc/$$/environ),
     * not what a shell would add to it. */
    char *body = xasprintf("tr '\\000' '\\n' < /proc/$$/environ | sort > %s", out);
    write_program(fx, "record", body);
    free(body);
    assert_true(
        quota_warning_run(fx->runner, rule(fx, "record"), "alice", "/home/alice", 950, 1000));
    run_until_idle(fx, 10);
    assert_int_equal(metric_of(fx, "ok"), 1);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char text[2048] = {0};
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    char host[256];
    gethostname(host, sizeof(host));
    char *want = xasprintf("HOME=/home/alice\nHOST=%s\nQUOTA_LIMIT=1000\n"
                           "QUOTA_PERCENTAGE=90\nQUOTA_RESOURCE=storage\nQUOTA_THRESHOLD=over\n"
                           "QUOTA_USAGE=950\nQUOTA_WARNING_NAME=record\nUSER=alice\n",
                           host);
    assert_string_equal(text, want);
    free(want);
    free(out);
}

static void test_timeout_kills_and_loop_runs(void **state)
{
    struct fx *fx = *state;
    char *out = xasprintf("%s/slow.started", fx->dir);
    char *body = xasprintf("touch %s\nsleep 31.7\n", out);
    write_program(fx, "slow", body);
    free(body);
    fx->ticks = 0;
    assert_true(quota_warning_run(fx->runner, rule(fx, "slow"), "bob", "/home/bob", 1, 10));
    assert_int_equal(quota_warning_runner_running(fx->runner), 1);
    double took = run_until_idle(fx, 10);
    assert_true(took >= 0.25 && took < 5.0);
    /* the loop kept running while the program did: 20 ms ticks */
    assert_true(fx->ticks >= 8);
    assert_int_equal(metric_of(fx, "timeout"), 1);
    assert_int_equal(access(out, F_OK), 0);
    /* the sleep the shell started went with it (its process group) */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "pgrep -f '^sleep 31.7$' >/dev/null");
    assert_int_not_equal(system(cmd), 0);
    free(out);
}

static void test_failures_and_log_only(void **state)
{
    struct fx *fx = *state;
    write_program(fx, "fails", "exit 3");
    assert_true(quota_warning_run(fx->runner, rule(fx, "fails"), "carol", "/h", 200, 1000));
    run_until_idle(fx, 10);
    assert_int_equal(metric_of(fx, "failed"), 1);
    assert_false(quota_warning_run(fx->runner, rule(fx, "missing"), "carol", "/h", 300, 1000));
    assert_int_equal(metric_of(fx, "failed"), 2);
    assert_false(quota_warning_run(fx->runner, rule(fx, "logonly"), "carol", "/h", 300, 1000));
    assert_int_equal(metric_of(fx, "logged"), 1);
    assert_int_equal(quota_warning_runner_running(fx->runner), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crossings),
        cmocka_unit_test_setup_teardown(test_runs_with_exact_environment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_kills_and_loop_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures_and_log_only, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
