/* Unit tests for services/monitor/monitor-backend-state.h: the exact number
 * of polls before BACKEND-FLUSH for retry/rapid settings, the reading of
 * rapid_fails_needed (failures >= needed), recovery with BACKEND-UP, the
 * restore policy and the director's own changes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "services/monitor/monitor-backend-state.h"

#include <stdio.h>
#include <string.h>

static struct monitor_thresholds th(int64_t retry, int64_t rounds, int64_t needed, bool own)
{
    struct monitor_thresholds t = {
        .retry_count = retry,
        .rapid_rounds = rounds,
        .rapid_fails_needed = needed,
        .restore_own_only = own,
    };
    return t;
}

/* Polls a backend that always fails until FLUSH; returns the number of
 * polls and how many of them were rapid (asked for by the state before). */
static int64_t polls_until_flush(struct monitor_backend_state *st, int64_t *rapid, int64_t limit)
{
    int64_t n = 0;
    *rapid = 0;
    while (n < limit) {
        if (monitor_state_next_poll(st) == MONITOR_POLL_RAPID)
            (*rapid)++;
        n++;
        enum monitor_report r = monitor_state_poll_done(st, false);
        if (r == MONITOR_REPORT_FLUSH)
            return n;
        assert_int_equal(r, MONITOR_REPORT_NONE);
    }
    return -1;
}

static void test_defaults_flush_after_13_polls(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(3, 10, 7, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, false);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_UP);
    assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);

    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_FAILING);
    assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);
    /* The third consecutive failure starts the rapid phase. */
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_RAPID);
    assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_RAPID);
    /* Ten rapid polls are all performed, even though the seventh failure
     * already meets the threshold. */
    for (int i = 1; i < 10; i++) {
        assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
        assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_RAPID);
    }
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_FLUSH);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_FLUSH);
    assert_int_equal(st.last_rapid_failed, 10);
    assert_true(st.flushed_by_us);
    /* A flush backend is polled at the normal interval and never rapidly;
     * failures report nothing more. */
    for (int i = 0; i < 20; i++) {
        assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);
        assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
        assert_int_equal(monitor_state_get(&st), MONITOR_STATE_FLUSH);
    }
    /* The first success brings it back. */
    assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_UP);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_UP);
    assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_NONE);
}

/* Exact counts for a grid of settings: a backend that always fails is
 * flushed at poll retry_count + rapid_rounds, with rapid_rounds rapid ones. */
static void test_exact_counts_grid(void **state)
{
    (void)state;
    for (int64_t retry = 1; retry <= 5; retry++) {
        for (int64_t rounds = 0; rounds <= 6; rounds++) {
            for (int64_t needed = 1; needed <= (rounds > 0 ? rounds : 1); needed++) {
                struct monitor_thresholds t = th(retry, rounds, needed, false);
                struct monitor_backend_state st;
                monitor_state_init(&st, &t, false);
                int64_t rapid = 0;
                int64_t n = polls_until_flush(&st, &rapid, 1000);
                char what[96];
                snprintf(what, sizeof(what), "retry=%lld rounds=%lld needed=%lld", (long long)retry,
                         (long long)rounds, (long long)needed);
                if (n != retry + rounds || rapid != rounds)
                    fail_msg("%s: flushed after %lld polls (%lld rapid), expected %lld (%lld)",
                             what, (long long)n, (long long)rapid, (long long)(retry + rounds),
                             (long long)rounds);
            }
        }
    }
}

/* Runs one rapid phase with `fails` failures out of `rounds` (failures
 * first or last) and returns the report of its last poll. */
static enum monitor_report rapid_phase(int64_t rounds, int64_t needed, int64_t fails,
                                       bool fails_first)
{
    struct monitor_thresholds t = th(2, rounds, needed, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, false);
    monitor_state_poll_done(&st, false);
    monitor_state_poll_done(&st, false);
    assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_RAPID);
    enum monitor_report r = MONITOR_REPORT_NONE;
    for (int64_t i = 0; i < rounds; i++) {
        bool fail_now = fails_first ? i < fails : i >= rounds - fails;
        assert_int_equal(r, MONITOR_REPORT_NONE);
        r = monitor_state_poll_done(&st, !fail_now);
    }
    assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);
    if (r == MONITOR_REPORT_NONE) {
        /* Back to normal polling with a fresh count. */
        assert_int_equal(monitor_state_get(&st), MONITOR_STATE_UP);
        assert_int_equal(st.failures, 0);
        assert_int_equal(st.last_rapid_failed, fails);
    }
    return r;
}

/* "Reaching" reading: failures == rapid_fails_needed flushes; one fewer does not. */
static void test_threshold_reached_not_exceeded(void **state)
{
    (void)state;
    assert_int_equal(rapid_phase(10, 7, 7, true), MONITOR_REPORT_FLUSH);
    assert_int_equal(rapid_phase(10, 7, 7, false), MONITOR_REPORT_FLUSH);
    assert_int_equal(rapid_phase(10, 7, 6, true), MONITOR_REPORT_NONE);
    assert_int_equal(rapid_phase(10, 7, 6, false), MONITOR_REPORT_NONE);
    assert_int_equal(rapid_phase(10, 7, 10, true), MONITOR_REPORT_FLUSH);
    assert_int_equal(rapid_phase(10, 7, 0, true), MONITOR_REPORT_NONE);
    assert_int_equal(rapid_phase(1, 1, 1, true), MONITOR_REPORT_FLUSH);
    assert_int_equal(rapid_phase(1, 1, 0, true), MONITOR_REPORT_NONE);
    assert_int_equal(rapid_phase(5, 5, 4, true), MONITOR_REPORT_NONE);
    assert_int_equal(rapid_phase(5, 5, 5, true), MONITOR_REPORT_FLUSH);
}

/* After a rapid phase below the threshold the count starts again from
 * zero: retry_count more failures before the next rapid phase. */
static void test_failed_rapid_phase_restarts_count(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(3, 4, 3, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, false);
    for (int i = 0; i < 3; i++)
        monitor_state_poll_done(&st, false);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_RAPID);
    /* 2 of 4 fail: below 3. */
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_UP);
    int64_t rapid = 0;
    assert_int_equal(polls_until_flush(&st, &rapid, 100), 3 + 4);
    assert_int_equal(rapid, 4);
}

static void test_success_resets_consecutive_failures(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(3, 10, 7, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, false);
    /* F F S F F S ...: never three in a row, never rapid. */
    for (int i = 0; i < 30; i++) {
        bool ok = i % 3 == 2;
        assert_int_equal(monitor_state_poll_done(&st, ok), MONITOR_REPORT_NONE);
        assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);
        assert_int_equal(monitor_state_get(&st), ok ? MONITOR_STATE_UP : MONITOR_STATE_FAILING);
    }
}

static void test_rapid_rounds_zero_flushes_at_retry_count(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(4, 0, 7, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, false);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
        assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);
    }
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_FLUSH);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_FLUSH);
}

/* A backend the director already holds in flush: the specification's
 * reading (restore any) brings it up on the first success. */
static void test_restore_any_ups_director_flush(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(3, 10, 7, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, true);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_FLUSH);
    assert_false(st.flushed_by_us);
    for (int i = 0; i < 5; i++)
        assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_UP);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_UP);
}

/* restore own: an operator's flush is left alone, the monitor's own is undone. */
static void test_restore_own_only(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(1, 2, 2, true);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, true);
    for (int i = 0; i < 5; i++)
        assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_FLUSH);
    /* The operator sets it up; then it fails and the monitor flushes it. */
    monitor_state_director(&st, false);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_UP);
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_FLUSH);
    /* The director's echo of our flush changes nothing. */
    monitor_state_director(&st, true);
    assert_true(st.flushed_by_us);
    assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_UP);
}

/* The director flushing a backend during its rapid phase ends the phase:
 * no report at what would have been its end. */
static void test_director_flush_during_rapid(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(2, 3, 2, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, false);
    monitor_state_poll_done(&st, false);
    monitor_state_poll_done(&st, false);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_RAPID);
    monitor_state_poll_done(&st, false);
    monitor_state_director(&st, true);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_FLUSH);
    assert_int_equal(monitor_state_next_poll(&st), MONITOR_POLL_NORMAL);
    for (int i = 0; i < 5; i++)
        assert_int_equal(monitor_state_poll_done(&st, false), MONITOR_REPORT_NONE);
    assert_int_equal(monitor_state_poll_done(&st, true), MONITOR_REPORT_UP);
}

/* An operator setting a flushed backend up restarts the count: a backend
 * that still fails needs the whole sequence again. */
static void test_director_up_restarts(void **state)
{
    (void)state;
    struct monitor_thresholds t = th(2, 3, 2, false);
    struct monitor_backend_state st;
    monitor_state_init(&st, &t, false);
    int64_t rapid = 0;
    assert_int_equal(polls_until_flush(&st, &rapid, 100), 5);
    monitor_state_director(&st, false);
    assert_int_equal(monitor_state_get(&st), MONITOR_STATE_UP);
    assert_false(st.flushed_by_us);
    assert_int_equal(polls_until_flush(&st, &rapid, 100), 5);
    assert_int_equal(rapid, 3);
}

static void test_labels(void **state)
{
    (void)state;
    assert_string_equal(monitor_state_label(MONITOR_STATE_UP), "up");
    assert_string_equal(monitor_state_label(MONITOR_STATE_FAILING), "failing");
    assert_string_equal(monitor_state_label(MONITOR_STATE_RAPID), "rapid");
    assert_string_equal(monitor_state_label(MONITOR_STATE_FLUSH), "flush");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_flush_after_13_polls),
        cmocka_unit_test(test_exact_counts_grid),
        cmocka_unit_test(test_threshold_reached_not_exceeded),
        cmocka_unit_test(test_failed_rapid_phase_restarts_count),
        cmocka_unit_test(test_success_resets_consecutive_failures),
        cmocka_unit_test(test_rapid_rounds_zero_flushes_at_retry_count),
        cmocka_unit_test(test_restore_any_ups_director_flush),
        cmocka_unit_test(test_restore_own_only),
        cmocka_unit_test(test_director_flush_during_rapid),
        cmocka_unit_test(test_director_up_restarts),
        cmocka_unit_test(test_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
