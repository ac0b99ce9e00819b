/* Unit tests for net/backoff.h: the reconnect policy every client shares
 * (min, doubling, capped at max; a success starts over). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/backoff.h"

static void test_doubles_to_the_cap(void **state)
{
    (void)state;
    struct net_backoff b;
    net_backoff_init(&b, 100, 5000);
    assert_int_equal(net_backoff_remaining(&b, 1000), 0);
    const int64_t want[] = {100, 200, 400, 800, 1600, 3200, 5000, 5000};
    int64_t now = 1000;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_int_equal(net_backoff_failed(&b, now), want[i]);
        assert_int_equal(b.retry_at_ms, now + want[i]);
        assert_int_equal(net_backoff_remaining(&b, now), want[i]);
        assert_int_equal(net_backoff_remaining(&b, now + want[i] / 2), want[i] - want[i] / 2);
        assert_int_equal(net_backoff_remaining(&b, now + want[i]), 0);
        now += want[i];
    }
}

static void test_success_starts_over(void **state)
{
    (void)state;
    struct net_backoff b;
    net_backoff_init(&b, 250, 10000);
    net_backoff_failed(&b, 0);
    net_backoff_failed(&b, 0);
    assert_int_equal(b.wait_ms, 500);
    net_backoff_reset(&b);
    assert_int_equal(net_backoff_remaining(&b, 0), 0);
    assert_int_equal(net_backoff_failed(&b, 7), 250);
}

static void test_cap_not_a_power_of_two_and_no_overflow(void **state)
{
    (void)state;
    struct net_backoff b;
    net_backoff_init(&b, 300, 1000);
    assert_int_equal(net_backoff_failed(&b, 0), 300);
    assert_int_equal(net_backoff_failed(&b, 0), 600);
    assert_int_equal(net_backoff_failed(&b, 0), 1000);
    net_backoff_init(&b, 1, INT64_MAX / 2 + 7);
    for (int i = 0; i < 80; i++)
        assert_true(net_backoff_failed(&b, 0) > 0);
    assert_int_equal(b.wait_ms, INT64_MAX / 2 + 7);
    /* Bad bounds are made sane rather than spinning: min at least 1 ms. */
    net_backoff_init(&b, 0, 0);
    assert_int_equal(net_backoff_failed(&b, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_doubles_to_the_cap),
        cmocka_unit_test(test_success_starts_over),
        cmocka_unit_test(test_cap_not_a_power_of_two_and_no_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
