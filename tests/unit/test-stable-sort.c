/* core/stable-sort: ordered output, equal keys in their first order, any
 * element size, against a simple reference on random arrays. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/stable-sort.h"

#include <stdlib.h>
#include <string.h>

struct item {
    int key;
    unsigned order; /* position before sorting */
    char pad[13];   /* an element size that is no power of two */
};

static int by_key(const void *a, const void *b, void *ctx)
{
    int *calls = ctx;
    (*calls)++;
    const struct item *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

static void test_random_arrays_sort_stably(void **state)
{
    (void)state;
    unsigned seed = 12345;
    for (size_t n = 0; n < 300; n += 1 + n / 7) {
        struct item *v = calloc(n + 1, sizeof(*v));
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            v[i].key = (int)((seed >> 16) % 7); /* many equal keys */
            v[i].order = (unsigned)i;
            memset(v[i].pad, (int)i, sizeof(v[i].pad));
        }
        int calls = 0;
        stable_sort(v, n, sizeof(*v), by_key, &calls);
        for (size_t i = 1; i < n; i++) {
            assert_true(v[i - 1].key <= v[i].key);
            if (v[i - 1].key == v[i].key)
                assert_true(v[i - 1].order < v[i].order);
        }
        for (size_t i = 0; i < n; i++) /* elements moved whole */
            assert_int_equal((unsigned char)v[i].pad[12], (unsigned char)v[i].order);
        /* n log2 n comparisons at most (with rounding) */
        size_t log = 0;
        while (((size_t)1 << log) < n)
            log++;
        assert_true((size_t)calls <= n * log + n);
        free(v);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_arrays_sort_stably),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
