/* Unit tests for storage/quota: the quota_rule grammar (quota-rule.h), the
 * effective-limit formula (quota-limits.h) and the `quota:` section of
 * petrel.yaml with its defaults and `file:line: key: message` errors. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/config.h"
#include "storage/quota/quota-limits.h"
#include "storage/quota/quota-rule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB 1024ull
#define MiB (1024ull * 1024)
#define GiB (1024ull * 1024 * 1024)
#define TiB (1024ull * 1024 * 1024 * 1024)

static uint64_t size_of(const char *text)
{
    uint64_t v = 12345;
    if (!quota_size_parse(text, strlen(text), &v))
        fail_msg("size '%s' refused", text);
    return v;
}

static void size_refused(const char *text)
{
    uint64_t v = 777;
    if (quota_size_parse(text, strlen(text), &v))
        fail_msg("size '%s' accepted as %llu", text, (unsigned long long)v);
    assert_int_equal(v, 777);
}

static void test_sizes(void **state)
{
    (void)state;
    assert_int_equal(size_of("0"), 0);
    assert_int_equal(size_of("1024"), 1024);
    assert_int_equal(size_of("1K"), KiB);
    assert_int_equal(size_of("1k"), KiB);
    assert_int_equal(size_of("50M"), 50 * MiB);
    assert_int_equal(size_of("50MB"), 50 * MiB);
    assert_int_equal(size_of("2G"), 2 * GiB);
    assert_int_equal(size_of("3T"), 3 * TiB);
    assert_int_equal(size_of("100b"), 100);
    assert_int_equal(size_of("18446744073709551615"), UINT64_MAX);
    size_refused("");
    size_refused("M");
    size_refused("-1");
    size_refused("1.5G");
    size_refused("1 G");
    size_refused("1P");
    size_refused("1GG");
    size_refused("18446744073709551616");
    size_refused("16777216T"); /* 2^64 */
    size_refused("0x10");
}

static void parse_ok(struct quota_rules *r, const char *text)
{
    struct petrel_error err = {0};
    if (!quota_rules_add(r, text, &err))
        fail_msg("rule '%s' refused: %s", text, err.message);
}

static void parse_refused(const char *text, const char *message)
{
    struct quota_rules r;
    quota_rules_init(&r);
    struct petrel_error err = {0};
    bool ok = quota_rules_add(&r, text, &err);
    quota_rules_free(&r);
    if (ok)
        fail_msg("rule '%s' accepted", text);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strcmp(err.message, message) != 0)
        fail_msg("message\n  got:      %s\n  expected: %s", err.message, message);
}

static void test_grammar(void **state)
{
    (void)state;
    struct quota_rules r;
    quota_rules_init(&r);
    parse_ok(&r, "*:storage=1G");
    assert_int_equal(r.limit[QUOTA_RES_STORAGE], GiB);
    assert_int_equal(r.limit[QUOTA_RES_MESSAGES], 0);
    /* The mailbox part may be left out; several rules per field. */
    parse_ok(&r, "storage=512M, messages=1000");
    assert_int_equal(r.limit[QUOTA_RES_STORAGE], 512 * MiB);
    assert_int_equal(r.limit[QUOTA_RES_MESSAGES], 1000);
    /* Dovecot's several items after one mailbox; `bytes` synonym. */
    parse_ok(&r, "*:bytes=2048:messages=10K");
    assert_int_equal(r.limit[QUOTA_RES_STORAGE], 2048);
    assert_int_equal(r.limit[QUOTA_RES_MESSAGES], 10 * KiB);
    /* Last *:storage= wins, also back to unlimited. */
    parse_ok(&r, "*:storage=1G,*:storage=0");
    assert_int_equal(r.limit[QUOTA_RES_STORAGE], 0);
    parse_ok(&r, ",,*:storage=3G ,");
    assert_int_equal(r.limit[QUOTA_RES_STORAGE], 3 * GiB);
    assert_int_equal(r.box_count, 0);
    /* Mailbox rules. */
    parse_ok(&r, "Trash:storage=+100M,Spam:ignore,Archive/*:messages=50%,Junk:storage=-1G");
    assert_int_equal(r.box_count, 4);
    assert_string_equal(r.boxes[0].pattern, "Trash");
    assert_int_equal(r.boxes[0].limit[QUOTA_RES_STORAGE].kind, QUOTA_LIMIT_PLUS);
    assert_int_equal(r.boxes[0].limit[QUOTA_RES_STORAGE].value, 100 * MiB);
    assert_true(r.boxes[1].ignore);
    assert_int_equal(r.boxes[2].limit[QUOTA_RES_MESSAGES].kind, QUOTA_LIMIT_PERCENT);
    assert_int_equal(r.boxes[2].limit[QUOTA_RES_MESSAGES].value, 50);
    assert_int_equal(r.boxes[3].limit[QUOTA_RES_STORAGE].kind, QUOTA_LIMIT_MINUS);
    /* A later rule for the same mailbox replaces the resource. */
    parse_ok(&r, "Trash:storage=10M");
    assert_int_equal(r.box_count, 4);
    assert_int_equal(r.boxes[0].limit[QUOTA_RES_STORAGE].kind, QUOTA_LIMIT_ABSOLUTE);
    quota_rules_free(&r);

    /* quota_rule, quota_rule2, ... in order: the last *:storage= wins. */
    quota_rules_init(&r);
    char *fields[] = {"*:storage=1G", "*:messages=100", "*:storage=2G", NULL};
    struct petrel_error err = {0};
    assert_true(quota_rules_add_list(&r, fields, &err));
    assert_int_equal(r.limit[QUOTA_RES_STORAGE], 2 * GiB);
    assert_int_equal(r.limit[QUOTA_RES_MESSAGES], 100);
    quota_rules_free(&r);

    parse_refused("*:storage", "quota rule '*:storage': expected <resource>=<limit>");
    parse_refused("*:files=1", "quota rule '*:files=1': unknown resource (storage or messages)");
    parse_refused("*:storage=1X",
                  "quota rule '*:storage=1X': bad limit (an integer with an optional K, M, G "
                  "or T unit)");
    parse_refused("*:storage=", "quota rule '*:storage=': bad limit (an integer with an "
                                "optional K, M, G or T unit)");
    parse_refused("*:storage=+1G", "quota rule '*:storage=+1G': relative and percentage limits "
                                   "are for named mailboxes, not '*'");
    parse_refused("*:storage=10%", "quota rule '*:storage=10%': relative and percentage limits "
                                   "are for named mailboxes, not '*'");
    parse_refused("Trash:storage=10M%", "quota rule 'Trash:storage=10M%': bad limit (an integer "
                                        "with an optional K, M, G or T unit)");
    parse_refused("*:ignore", "quota rule '*:ignore': '*' cannot be ignored");
    parse_refused(":storage=1", "quota rule ':storage=1': bad mailbox name");
    parse_refused("*:storage=1:", "quota rule '*:storage=1:': empty item after ':'");
    parse_refused("Trash:", "quota rule 'Trash:': expected <resource>=<limit>");
    parse_refused("*:storage=-5", "quota rule '*:storage=-5': relative and percentage limits are "
                                  "for named mailboxes, not '*'");

    /* The cap on mailbox rules. */
    quota_rules_init(&r);
    char buf[64];
    for (int i = 0; i < QUOTA_MAX_RULES; i++) {
        snprintf(buf, sizeof(buf), "box%d:ignore", i);
        parse_ok(&r, buf);
    }
    assert_false(quota_rules_add(&r, "one-more:ignore", &err));
    assert_string_equal(err.message, "quota rule 'one-more:ignore': too many mailbox rules");
    quota_rules_free(&r);
}

static void test_mailbox_rules(void **state)
{
    (void)state;
    struct quota_rules r;
    quota_rules_init(&r);
    parse_ok(&r, "*:storage=1G:messages=1000");
    parse_ok(&r, "Trash:storage=+100M,Archive*:storage=50%,Junk:storage=-2G,Spam:ignore");
    parse_ok(&r, "Big:storage=5G,Lists/?:messages=+10");
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, NULL), GiB);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "INBOX"), GiB);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Trash"), GiB + 100 * MiB);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Archive/2024"), GiB / 2);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Junk"), 1); /* never unlimited */
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Big"), 5 * GiB);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_MESSAGES, "Lists/a"), 1010);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_MESSAGES, "Lists/ab"), 1000);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_MESSAGES, "Trash"), 1000);
    assert_true(quota_rules_mailbox_ignored(&r, "Spam"));
    assert_false(quota_rules_mailbox_ignored(&r, "Trash"));
    assert_false(quota_rules_mailbox_ignored(&r, "spam")); /* names are case-sensitive */
    quota_rules_free(&r);

    /* Relative and percentage rules over an unlimited user stay unlimited;
     * an absolute mailbox rule still limits that mailbox. */
    quota_rules_init(&r);
    parse_ok(&r, "Trash:storage=+100M,Sent:storage=10%,Drafts:storage=1M");
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Trash"), 0);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Sent"), 0);
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Drafts"), MiB);
    quota_rules_free(&r);

    assert_true(quota_mailbox_match("INBOX", "inbox"));
    assert_true(quota_mailbox_match("inbox", "INBOX"));
    assert_true(quota_mailbox_match("*", "anything/at/all"));
    assert_true(quota_mailbox_match("a*b*c", "aXXbYYc"));
    assert_false(quota_mailbox_match("a*b*c", "aXXbYYd"));
    assert_true(quota_mailbox_match("?", "x"));
    assert_false(quota_mailbox_match("?", ""));
}

static struct petrel_config *config_of(const char *text)
{
    struct petrel_error err = {0};
    struct petrel_config *cfg = config_parse("petrel.yaml", text, strlen(text), &err);
    if (cfg == NULL)
        fail_msg("config refused: %s", err.message);
    return cfg;
}

static void test_formula(void **state)
{
    (void)state;
    struct petrel_config *cfg = config_of("quota:\n  enabled: true\n");
    struct quota_config *q = &cfg->quota;
    struct quota_rules r;
    quota_rules_init(&r);
    parse_ok(&r, "*:storage=1G:messages=1000");
    struct quota_limits l;

    /* Defaults: 100 %, no extra, 10M grace on delivery only. */
    quota_limits_compute(q, &r, NULL, QUOTA_POINT_INTERACTIVE, &l);
    assert_int_equal(l.storage, GiB);
    assert_int_equal(l.messages, 1000);
    quota_limits_compute(q, &r, NULL, QUOTA_POINT_DELIVERY, &l);
    assert_int_equal(l.storage, GiB + 10 * MiB);
    assert_int_equal(l.messages, 1000);

    /* rule x pct / 100 + extra (+ grace). */
    q->storage_percentage = 90;
    q->message_percentage = 150;
    q->storage_extra = 5 * MiB;
    q->storage_grace = 20 * MiB;
    quota_limits_compute(q, &r, NULL, QUOTA_POINT_INTERACTIVE, &l);
    assert_int_equal(l.storage, GiB * 90 / 100 + 5 * MiB);
    assert_int_equal(l.messages, 1500);
    quota_limits_compute(q, &r, NULL, QUOTA_POINT_DELIVERY, &l);
    assert_int_equal(l.storage, GiB * 90 / 100 + 5 * MiB + 20 * MiB);

    /* Per-mailbox rule goes through the same scaling. */
    parse_ok(&r, "Trash:storage=+100M");
    quota_limits_compute(q, &r, "Trash", QUOTA_POINT_INTERACTIVE, &l);
    assert_int_equal(l.storage, (GiB + 100 * MiB) * 90 / 100 + 5 * MiB);

    /* Unlimited stays unlimited: extra and grace add nothing. */
    struct quota_rules none;
    quota_rules_init(&none);
    quota_limits_compute(q, &none, NULL, QUOTA_POINT_DELIVERY, &l);
    assert_int_equal(l.storage, 0);
    assert_int_equal(l.messages, 0);

    /* Scaling never rounds a limit down to "unlimited". */
    struct quota_rules tiny;
    quota_rules_init(&tiny);
    parse_ok(&tiny, "*:storage=1:messages=1");
    q->storage_percentage = 1;
    q->message_percentage = 1;
    q->storage_extra = 0;
    quota_limits_compute(q, &tiny, NULL, QUOTA_POINT_INTERACTIVE, &l);
    assert_int_equal(l.storage, 1);
    assert_int_equal(l.messages, 1);
    /* Saturation instead of wrapping. */
    parse_ok(&tiny, "*:storage=18446744073709551615");
    q->storage_percentage = 10000;
    q->storage_extra = 1;
    quota_limits_compute(q, &tiny, NULL, QUOTA_POINT_DELIVERY, &l);
    assert_int_equal(l.storage, UINT64_MAX);
    quota_rules_free(&tiny);

    /* quota_check: usage + size > limit; size 0 = at the limit is over. */
    q->storage_percentage = 100;
    q->message_percentage = 100;
    q->storage_extra = 0;
    struct quota_limits lim = {.storage = 1000, .messages = 10};
    struct quota_usage u = {.storage = 900, .messages = 9};
    assert_int_equal(quota_check(q, &lim, &u, 100, 1), QUOTA_OK);
    assert_int_equal(quota_check(q, &lim, &u, 101, 1), QUOTA_OVER_STORAGE);
    assert_int_equal(quota_check(q, &lim, &u, 0, 1), QUOTA_OK);
    assert_int_equal(quota_check(q, &lim, &u, 1, 2), QUOTA_OVER_MESSAGES);
    u.storage = 1000;
    assert_int_equal(quota_check(q, &lim, &u, 0, 0), QUOTA_OVER_STORAGE);
    struct quota_limits unl = {0, 0};
    assert_int_equal(quota_check(q, &unl, &u, UINT64_MAX, UINT64_MAX), QUOTA_OK);
    q->mail_size = 50;
    assert_int_equal(quota_check(q, &unl, &u, 51, 1), QUOTA_TOO_LARGE);
    assert_int_equal(quota_check(q, &unl, &u, 50, 1), QUOTA_OK);

    quota_rules_free(&none);
    quota_rules_free(&r);
    config_free(cfg);
}

/* An enormous rule scaled up saturates; it never wraps round to a small
 * limit (2^64 + 184 wrapped would be 184 bytes). */
static void test_scaling_never_wraps(void **state)
{
    (void)state;
    struct petrel_config *cfg = config_of("quota:\n  enabled: true\n");
    struct quota_config *q = &cfg->quota;
    struct quota_rules r;
    quota_rules_init(&r);
    /* 9223372036854775900 / 100 * 200 = 2^64 + 184 */
    parse_ok(&r, "*:storage=9223372036854775900:messages=9223372036854775900");
    q->storage_percentage = 200;
    q->message_percentage = 200;
    struct quota_limits l;
    quota_limits_compute(q, &r, NULL, QUOTA_POINT_INTERACTIVE, &l);
    assert_int_equal(l.storage, UINT64_MAX);
    assert_int_equal(l.messages, UINT64_MAX);
    quota_rules_free(&r);

    /* A percentage rule of a named mailbox, the same product. */
    quota_rules_init(&r);
    parse_ok(&r, "*:storage=9223372036854775900");
    parse_ok(&r, "Trash:storage=200%");
    assert_int_equal(quota_rules_limit(&r, QUOTA_RES_STORAGE, "Trash"), UINT64_MAX);
    quota_rules_free(&r);
    config_free(cfg);
}

static void test_config_defaults(void **state)
{
    (void)state;
    struct petrel_config *cfg = config_of("components: [backend-api]\n");
    const struct quota_config *q = &cfg->quota;
    assert_false(q->enabled);
    assert_string_equal(q->quota_name, "User quota");
    assert_string_equal(q->exceeded_message, "Quota exceeded (mailbox for user is full)");
    assert_int_equal(q->mail_size, 0);
    assert_int_equal(q->storage_percentage, 100);
    assert_int_equal(q->message_percentage, 100);
    assert_int_equal(q->storage_extra, 0);
    assert_int_equal(q->storage_grace, 10 * MiB);
    assert_false(q->ignore_unlimited);
    assert_false(q->hidden);
    assert_int_equal(q->mailbox_count, 0);
    assert_int_equal(q->mailbox_message_count, 0);
    assert_null(q->clone_dicts[0]);
    assert_int_equal(q->clone_flush_delay_ms, 10000);
    assert_null(q->warning_bin_dir);
    assert_int_equal(q->warning_exec_timeout_ms, 10000);
    assert_int_equal(q->warning_count, 0);
    assert_string_equal(q->over_status_mask, "");
    assert_false(q->over_status_lazy_check);
    assert_null(q->over_status_execute);
    assert_string_equal(q->status_nouser, "REJECT Unknown user");
    assert_string_equal(q->status_overquota, "552 5.2.2 Mailbox is full");
    assert_string_equal(q->status_success, "DUNNO");
    assert_string_equal(q->status.recipient_delimiter, "+");
    config_free(cfg);

    cfg = config_of("quota:\n"
                    "  enabled: true\n"
                    "  quota_name: Mail\n"
                    "  quota_mail_size: 50M\n"
                    "  quota_storage_percentage: 95\n"
                    "  quota_message_percentage: 110\n"
                    "  quota_storage_extra: 1G\n"
                    "  quota_storage_grace: \"\"\n"
                    "  quota_ignore_unlimited: true\n"
                    "  quota_hidden: true\n"
                    "  quota_mailbox_count: 100\n"
                    "  quota_mailbox_message_count: 5000\n"
                    "  quota_clone_flush_delay: 30s\n"
                    "  quota_warning_bin_dir: /usr/local/lib/petrel/quota\n"
                    "  quota_warning_exec_timeout: 5\n"
                    "  quota_warnings:\n"
                    "    - quota_warning_name: almost\n"
                    "      quota_warning_resource: storage\n"
                    "      quota_warning_threshold: over\n"
                    "      quota_warning_percentage: 90\n"
                    "      quota_warning_execute: quota-warning\n"
                    "    - quota_warning_name: ok-again\n"
                    "      quota_warning_resource: message\n"
                    "      quota_warning_threshold: under\n"
                    "      quota_warning_percentage: 80\n"
                    "  quota_over_status_mask: \"*yes*\"\n"
                    "  quota_status_nouser: \"\"\n"
                    "  quota_status_overquota: \"452 4.2.2 Mailbox is full\"\n"
                    "  quota_status:\n"
                    "    recipient_delimiter: \"+-\"\n");
    q = &cfg->quota;
    assert_true(q->enabled);
    assert_string_equal(q->quota_name, "Mail");
    assert_int_equal(q->mail_size, 50 * MiB);
    assert_int_equal(q->storage_percentage, 95);
    assert_int_equal(q->message_percentage, 110);
    assert_int_equal(q->storage_extra, GiB);
    assert_int_equal(q->storage_grace, 0);
    assert_true(q->ignore_unlimited);
    assert_true(q->hidden);
    assert_int_equal(q->mailbox_count, 100);
    assert_int_equal(q->mailbox_message_count, 5000);
    assert_int_equal(q->clone_flush_delay_ms, 30000);
    assert_string_equal(q->warning_bin_dir, "/usr/local/lib/petrel/quota");
    assert_int_equal(q->warning_exec_timeout_ms, 5000);
    assert_int_equal(q->warning_count, 2);
    assert_int_equal(q->warnings[0].resource, QUOTA_RES_STORAGE);
    assert_int_equal(q->warnings[0].threshold, QUOTA_WARN_OVER);
    assert_int_equal(q->warnings[0].percentage, 90);
    assert_string_equal(q->warnings[0].execute, "quota-warning");
    assert_int_equal(q->warnings[1].resource, QUOTA_RES_MESSAGES);
    assert_int_equal(q->warnings[1].threshold, QUOTA_WARN_UNDER);
    assert_null(q->warnings[1].execute);
    assert_string_equal(q->over_status_mask, "*yes*");
    assert_string_equal(q->status_nouser, "");
    assert_string_equal(q->status_overquota, "452 4.2.2 Mailbox is full");
    assert_string_equal(q->status.recipient_delimiter, "+-");

    /* --check-config prints the section. */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    config_print(cfg, out);
    fclose(out);
    assert_non_null(strstr(text, "quota:\n  enabled: true\n  quota_name: \"Mail\"\n"));
    assert_non_null(strstr(text, "  quota_mail_size: 52428800\n"));
    assert_non_null(strstr(text, "  quota_storage_grace: 0\n"));
    assert_non_null(strstr(text, "      quota_warning_threshold: under\n"));
    assert_non_null(strstr(text, "  quota_status_overquota: \"452 4.2.2 Mailbox is full\"\n"));
    free(text);
    config_free(cfg);
}

static void expect_error(const char *text, const char *message)
{
    struct petrel_error err = {0};
    struct petrel_config *cfg = config_parse("petrel.yaml", text, strlen(text), &err);
    if (cfg != NULL) {
        config_free(cfg);
        fail_msg("config accepted, expected: %s", message);
    }
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    if (strcmp(err.message, message) != 0)
        fail_msg("message\n  got:      %s\n  expected: %s", err.message, message);
}

static void test_config_errors(void **state)
{
    (void)state;
    expect_error("quota:\n  enabled: maybe\n",
                 "petrel.yaml:2: quota.enabled: expected true or false, found 'maybe'");
    expect_error("quota:\n  nonsense: 1\n", "petrel.yaml:2: quota.nonsense: unknown key");
    expect_error("quota:\n  quota_mail_size: 50X\n",
                 "petrel.yaml:2: quota.quota_mail_size: expected a size: an integer with an "
                 "optional K, M, G or T unit");
    expect_error("quota:\n  quota_storage_grace: -1\n",
                 "petrel.yaml:2: quota.quota_storage_grace: expected a size: an integer with an "
                 "optional K, M, G or T unit");
    expect_error("quota:\n  quota_storage_percentage: 0\n",
                 "petrel.yaml:2: quota.quota_storage_percentage: 0 is out of range [1, 10000]");
    expect_error("quota:\n  quota_mailbox_count: -3\n",
                 "petrel.yaml:2: quota.quota_mailbox_count: -3 is out of range [0, 1000000]");
    expect_error("quota:\n  quota_warning_bin_dir: relative/dir\n",
                 "petrel.yaml:2: quota.quota_warning_bin_dir: must be an absolute path");
    expect_error("quota:\n  quota_warnings:\n    - quota_warning_name: w\n"
                 "      quota_warning_resource: storage\n"
                 "      quota_warning_percentage: 90\n"
                 "      quota_warning_execute: ../../bin/sh\n",
                 "petrel.yaml:6: quota.quota_warnings.quota_warning_execute: a bare program name "
                 "inside quota_warning_bin_dir (no '/')");
    expect_error("quota:\n  quota_warnings:\n    - quota_warning_name: w\n"
                 "      quota_warning_resource: disk\n"
                 "      quota_warning_percentage: 90\n",
                 "petrel.yaml:4: quota.quota_warnings.quota_warning_resource: expected storage "
                 "or message");
    expect_error("quota:\n  quota_warnings:\n    - quota_warning_name: w\n"
                 "      quota_warning_resource: storage\n"
                 "      quota_warning_threshold: above\n"
                 "      quota_warning_percentage: 90\n",
                 "petrel.yaml:5: quota.quota_warnings.quota_warning_threshold: expected over or "
                 "under");
    expect_error("quota:\n  quota_over_status_execute: /bin/sh\n",
                 "petrel.yaml:2: quota.quota_over_status_execute: a bare program name inside "
                 "quota_warning_bin_dir (no '/')");
    expect_error("quota:\n  quota_status_overquota: \"\"\n",
                 "petrel.yaml:2: quota.quota_status_overquota: must not be empty");
    expect_error("quota:\n  quota_status:\n    recipient_delimiter: \"@\"\n",
                 "petrel.yaml:3: quota.quota_status.recipient_delimiter: printable ASCII "
                 "characters other than '@', '\"' and '\\' only");
    expect_error("quota:\n  quota_status:\n    listen: [\"nohost\"]\n",
                 "petrel.yaml:3: quota.quota_status.listen: invalid address 'nohost' (expected "
                 "host:port)");
    struct petrel_config *ok = config_of("dicts:\n  mirror: {driver: memory}\n"
                                         "quota:\n  quota_clone_dicts: [mirror]\n");
    assert_string_equal(ok->quota.clone_dicts[0], "mirror");
    config_free(ok);
    expect_error("quota:\n  quota_clone_dicts: [mirror]\n",
                 "petrel.yaml:2: quota.quota_clone_dicts: no dict named 'mirror' in dicts:");
    expect_error("components: [quota-status]\n",
                 "petrel.yaml: quota.quota_status.listen: the quota-status component needs an "
                 "address to listen on");
    expect_error("components: [quota-status]\nquota:\n  quota_status:\n"
                 "    listen: [\"127.0.0.1:10240\"]\n",
                 "petrel.yaml:4: quota.quota_status.auth_addr: the quota-status component needs "
                 "the auth service's address");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_mailbox_rules),
        cmocka_unit_test(test_formula),
        cmocka_unit_test(test_scaling_never_wraps),
        cmocka_unit_test(test_config_defaults),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
