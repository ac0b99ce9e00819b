/* Unit tests for core/log.h: level names, per-component overrides, quoting,
 * and the logfmt line written to stderr. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int uninstall(void **state)
{
    log_install(NULL);
    return 0;
}

static void test_level_names_parse_case_insensitively(void **state)
{
    enum log_level l = LOG_ERROR;
    assert_true(log_level_parse("debug", &l));
    assert_int_equal(l, LOG_DEBUG);
    assert_true(log_level_parse("INFO", &l));
    assert_int_equal(l, LOG_INFO);
    assert_true(log_level_parse("Warn", &l));
    assert_int_equal(l, LOG_WARN);
    assert_true(log_level_parse("warning", &l));
    assert_int_equal(l, LOG_WARN);
    assert_true(log_level_parse("error", &l));
    assert_int_equal(l, LOG_ERROR);
    l = LOG_INFO;
    assert_false(log_level_parse("", &l));
    assert_false(log_level_parse("trace", &l));
    assert_false(log_level_parse("debug ", &l));
    assert_false(log_level_parse("err", &l));
    assert_int_equal(l, LOG_INFO);
}

static void test_level_values_follow_slog(void **state)
{
    assert_int_equal(LOG_DEBUG, -4);
    assert_int_equal(LOG_INFO, 0);
    assert_int_equal(LOG_WARN, 4);
    assert_int_equal(LOG_ERROR, 8);
    assert_string_equal(log_level_name(LOG_DEBUG), "debug");
    assert_string_equal(log_level_name(LOG_INFO), "info");
    assert_string_equal(log_level_name(LOG_WARN), "warn");
    assert_string_equal(log_level_name(LOG_ERROR), "error");
}

static void test_without_a_table_info_and_above_are_enabled(void **state)
{
    assert_null(log_installed());
    assert_int_equal(log_level_for("anything"), LOG_INFO);
    assert_false(log_enabled(LOG_DEBUG, "x"));
    assert_true(log_enabled(LOG_INFO, "x"));
    assert_true(log_enabled(LOG_ERROR, NULL));
}

static void test_overrides_apply_per_component_and_live(void **state)
{
    struct log_levels levels = {.base = LOG_WARN};
    snprintf(levels.overrides[0].component, sizeof(levels.overrides[0].component), "http");
    levels.overrides[0].level = LOG_DEBUG;
    snprintf(levels.overrides[1].component, sizeof(levels.overrides[1].component), "dict");
    levels.overrides[1].level = LOG_ERROR;
    levels.override_count = 2;
    log_install(&levels);
    assert_ptr_equal(log_installed(), &levels);

    assert_int_equal(log_level_for("http"), LOG_DEBUG);
    assert_int_equal(log_level_for("dict"), LOG_ERROR);
    assert_int_equal(log_level_for("telemetry"), LOG_WARN);
    assert_int_equal(log_level_for(NULL), LOG_WARN);
    assert_int_equal(log_level_for("HTTP"), LOG_WARN); /* names are exact */
    assert_true(log_enabled(LOG_DEBUG, "http"));
    assert_false(log_enabled(LOG_WARN, "dict"));
    assert_false(log_enabled(LOG_INFO, "telemetry"));
    assert_true(log_enabled(LOG_WARN, "telemetry"));

    /* The table is live, not copied: a change applies at once. */
    levels.base = LOG_DEBUG;
    levels.override_count = 0;
    assert_true(log_enabled(LOG_DEBUG, "dict"));
}

/* Threads log while the main loop swaps tables (SIGHUP) and sets the base
 * level (/debug/loglevel): a reader sees one table whole, so a component
 * with the same override in every table always gets it, and the base is
 * always one of the levels that were set. */
struct reader_arg {
    _Atomic int stop; /* atomic, not volatile: ThreadSanitizer (scripts/tsan.sh) */
    unsigned long wrong;
    unsigned long reads;
};

static void *level_reader(void *p)
{
    struct reader_arg *a = p;
    while (!a->stop) {
        enum log_level imap = log_level_for("imap");
        enum log_level base = log_level_for("nobody");
        if (imap != LOG_DEBUG || (base != LOG_WARN && base != LOG_ERROR))
            a->wrong++;
        a->reads++;
    }
    return NULL;
}

static void fill_table(struct log_levels *t, unsigned variant)
{
    memset(t, 0, sizeof(*t));
    t->base = variant % 2 == 0 ? LOG_WARN : LOG_ERROR;
    /* differing overrides in front of the common one, of differing lengths */
    size_t n = 1 + variant % (LOG_MAX_OVERRIDES - 1);
    for (size_t i = 0; i < n - 1; i++) {
        char *name = t->overrides[i].component;
        size_t len = 1 + (variant + i) % 40; /* 1..40 of the 47 bytes */
        memset(name, 'a' + (int)(i % 26), len);
        name[len] = '\0';
        t->overrides[i].level = LOG_INFO;
    }
    snprintf(t->overrides[n - 1].component, sizeof(t->overrides[n - 1].component), "imap");
    t->overrides[n - 1].level = LOG_DEBUG;
    t->override_count = n;
}

static void test_tables_swap_under_concurrent_readers(void **state)
{
    enum { TABLES = 2000 };
    struct log_levels *tables = calloc(TABLES, sizeof(*tables));
    assert_non_null(tables);
    fill_table(&tables[0], 0);
    log_install(&tables[0]);
    struct reader_arg arg = {0};
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, level_reader, &arg), 0);
    for (unsigned i = 1; i < TABLES; i++) {
        fill_table(&tables[i], i);
        log_install(&tables[i]);
        log_set_base_level(i % 3 == 0 ? LOG_WARN : LOG_ERROR);
        assert_true(log_base_level() == LOG_WARN || log_base_level() == LOG_ERROR);
    }
    log_set_base_level(LOG_WARN);
    assert_int_equal(log_base_level(), LOG_WARN);
    arg.stop = 1;
    pthread_join(reader, NULL);
    assert_true(arg.reads > 0);
    assert_int_equal(arg.wrong, 0);
    log_install(NULL);
    assert_int_equal(log_base_level(), LOG_INFO);
    log_set_base_level(LOG_DEBUG); /* no table: nothing to change */
    assert_int_equal(log_level_for("imap"), LOG_INFO);
    free(tables);
}

static void test_quote_leaves_simple_values_alone(void **state)
{
    char out[64];
    assert_string_equal(log_quote(out, sizeof(out), "plain"), "plain");
    assert_string_equal(log_quote(out, sizeof(out), "a/b:c-d.e@f"), "a/b:c-d.e@f");
    assert_ptr_equal(log_quote(out, sizeof(out), "x"), out);
}

static void test_quote_escapes_what_logfmt_needs(void **state)
{
    char out[64];
    assert_string_equal(log_quote(out, sizeof(out), ""), "\"\"");
    assert_string_equal(log_quote(out, sizeof(out), "two words"), "\"two words\"");
    assert_string_equal(log_quote(out, sizeof(out), "k=v"), "\"k=v\"");
    assert_string_equal(log_quote(out, sizeof(out), "say \"hi\""), "\"say \\\"hi\\\"\"");
    assert_string_equal(log_quote(out, sizeof(out), "back\\slash"), "\"back\\\\slash\"");
    assert_string_equal(log_quote(out, sizeof(out), "line\nbreak"), "\"line\\nbreak\"");
    assert_string_equal(log_quote(out, sizeof(out), "tab\there"), "\"tab\\x09here\"");
    assert_string_equal(log_quote(out, sizeof(out), "del\x7f"), "\"del\\x7f\"");
}

static void test_quote_truncates_within_size(void **state)
{
    const char *inputs[] = {"plain-value-that-is-long", "a value with spaces and \"quotes\"",
                            "\x01\x02\x03\x04\x05\x06\x07\x08", ""};
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        for (size_t size = 1; size < 48; size++) {
            /* Exact-size heap buffer: ASan catches a write past `size`. */
            char *out = malloc(size);
            assert_non_null(out);
            log_quote(out, size, inputs[i]);
            assert_true(strlen(out) < size);
            /* A quoted result that starts with a quote also ends with one. */
            size_t n = strlen(out);
            if (n >= 2 && out[0] == '"')
                assert_int_equal(out[n - 1], '"');
            free(out);
        }
    }
}

/* Runs `fn` with stderr redirected to a temporary file; returns what it wrote. */
static char *capture_stderr(void (*fn)(void))
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), STDERR_FILENO) >= 0);
    fn();
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    fseek(tmp, 0, SEEK_END);
    long size = ftell(tmp);
    rewind(tmp);
    char *text = calloc(1, (size_t)size + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)size, tmp), (size_t)size);
    fclose(tmp);
    return text;
}

static void emit_events(void)
{
    char user[64];
    log_event(LOG_WARN, "backend-api", "request failed", "user=%s status=%d",
              log_quote(user, sizeof(user), "alice smith"), 503);
    log_event(LOG_DEBUG, "backend-api", "hidden", NULL);
    log_info(NULL, "started", NULL);
}

static void test_event_line_format(void **state)
{
    char *text = capture_stderr(emit_events);
    /* ts=YYYY-MM-DDTHH:MM:SS.mmmZ */
    assert_true(strncmp(text, "ts=", 3) == 0);
    assert_int_equal(text[7], '-');
    assert_int_equal(text[13], 'T');
    assert_int_equal(text[22], '.');
    assert_int_equal(text[26], 'Z');
    const char *rest = text + 27;
    const char *first = " level=warn component=backend-api msg=\"request failed\" "
                        "user=\"alice smith\" status=503\n";
    assert_true(strncmp(rest, first, strlen(first)) == 0);
    const char *second = strchr(rest, '\n') + 1;
    assert_true(strncmp(second, "ts=", 3) == 0);
    assert_string_equal(second + 27, " level=info component=petrel msg=started\n");
    assert_null(strstr(text, "hidden"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_level_names_parse_case_insensitively, uninstall),
        cmocka_unit_test_teardown(test_level_values_follow_slog, uninstall),
        cmocka_unit_test_teardown(test_without_a_table_info_and_above_are_enabled, uninstall),
        cmocka_unit_test_teardown(test_overrides_apply_per_component_and_live, uninstall),
        cmocka_unit_test_teardown(test_tables_swap_under_concurrent_readers, uninstall),
        cmocka_unit_test_teardown(test_quote_leaves_simple_values_alone, uninstall),
        cmocka_unit_test_teardown(test_quote_escapes_what_logfmt_needs, uninstall),
        cmocka_unit_test_teardown(test_quote_truncates_within_size, uninstall),
        cmocka_unit_test_teardown(test_event_line_format, uninstall),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
