/* Unit tests for the quota mirror (storage/quota/quota-clone.h) on a real
 * libevent loop with a real mail store and real memory and file dicts:
 * the value parser; saves by two users reaching both dicts in one batch
 * (one transaction over two users' priv/ keys, dict_transaction_set_user);
 * a user written only after the delay, or at once when its last holder
 * lets go of it (the session's end); an expunge lowering the mirror; a
 * user whose holder goes without a change since the last write costing
 * no write. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/metrics.h"
#include "core/xalloc.h"
#include "dict/dict.h"
#include "server/config.h"
#include "storage/quota/quota-clone.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void test_parse_value(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_true(quota_clone_parse_value("0", 1, &v) && v == 0);
    assert_true(quota_clone_parse_value("1234", 4, &v) && v == 1234);
    assert_true(quota_clone_parse_value("18446744073709551615", 20, &v) && v == UINT64_MAX);
    assert_false(quota_clone_parse_value("18446744073709551616", 20, &v));
    assert_false(quota_clone_parse_value("", 0, &v));
    assert_false(quota_clone_parse_value("-1", 2, &v));
    assert_false(quota_clone_parse_value("+1", 2, &v));
    assert_false(quota_clone_parse_value("1 ", 2, &v));
    assert_false(quota_clone_parse_value("12x", 3, &v));
    assert_false(quota_clone_parse_value("000000000000000000001", 21, &v));
}

struct fx {
    char dir[128];
    struct event_base *base;
    struct metrics_registry *metrics;
    struct petrel_config *pc;
    struct dict_registry *dicts; /* the daemon's part: made from pc->dicts */
    struct mail_storage *storage;
    struct quota_clone *clone;
};

static struct fx *fx_new(const char *delay)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/petrel-test-quota-clone-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    char *yaml = xasprintf("mail:\n  home: %s/mail/%%u\n  fsync: never\n"
                           "dicts:\n  m: {driver: memory}\n"
                           "  f: {driver: file, path: %s/f.db}\n"
                           "quota:\n  enabled: true\n  quota_clone_dicts: [m, f]\n"
                           "  quota_clone_flush_delay: %s\n",
                           f->dir, f->dir, delay);
    struct petrel_error err = {0};
    f->pc = config_parse("petrel.yaml", yaml, strlen(yaml), &err);
    free(yaml);
    if (f->pc == NULL)
        fail_msg("config: %s", err.message);
    f->base = event_base_new();
    f->metrics = metrics_registry_new();
    f->dicts = dict_registry_new(f->pc->dicts);
    assert_true(dict_registry_open(f->dicts, f->base, f->metrics, &err));
    f->storage = mail_storage_new(&f->pc->mail, NULL);
    f->clone = quota_clone_new(f->base, &f->pc->quota, f->dicts, f->storage, f->metrics, &err);
    assert_non_null(f->clone);
    assert_true(mail_storage_module_register(f->storage, &quota_clone_module, f->clone, &err));
    return f;
}

static void fx_free(struct fx *f)
{
    dict_registry_free(f->dicts);
    f->dicts = NULL;
    quota_clone_free(f->clone);
    mail_storage_free(f->storage);
    metrics_registry_free(f->metrics);
    event_base_free(f->base);
    config_free(f->pc);
    char *cmd = xasprintf("rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(f);
}

/* Runs the loop for about `ms` milliseconds. */
static void run_for(struct fx *f, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
}

struct got {
    int ret;
    uint64_t value;
};

static void got_cb(const struct dict_lookup_result *r, void *ctx)
{
    struct got *g = ctx;
    g->ret = r->ret;
    if (r->ret > 0 && !quota_clone_parse_value(r->values[0].data, r->values[0].len, &g->value))
        g->ret = -2;
}

/* The mirrored value of `key` for `user` in dict `name` (-1 when absent). */
static int64_t mirrored(struct fx *f, const char *name, const char *user, const char *key)
{
    struct got g = {-1, 0};
    struct dict_op_settings set = {.username = user};
    dict_lookup(dict_registry_get(f->dicts, name), &set, key, got_cb, &g);
    assert_true(g.ret == 0 || g.ret == 1); /* memory and file answer at once */
    return g.ret == 1 ? (int64_t)g.value : -1;
}

static uint64_t save(struct fx *f, const char *user, size_t len, uint32_t *uid)
{
    struct petrel_error err = {0};
    struct mail_user *u = mail_user_get(f->storage, user, &err);
    assert_non_null(u);
    const struct namespace_config *ns = mail_user_namespace(u, "personal", &err);
    struct mailbox *box = mailbox_open(u, ns, "INBOX", &err);
    assert_non_null(box);
    char *msg = xmalloc(len);
    memset(msg, 'x', len);
    memcpy(msg, "Subject: t\r\n\r\n", 14);
    assert_true(mailbox_append(box, msg, len, 0, NULL, 0, uid, &err));
    free(msg);
    mailbox_close(box);
    return len;
}

static double writes(struct fx *f, const char *dict)
{
    struct buf text = {0};
    metrics_render(f->metrics, &text);
    char *pat = xasprintf("petrel_quota_clone_writes_total{dict=\"%s\",result=\"ok\"} ", dict);
    char *at = strstr(buf_cstr(&text), pat);
    double v = at != NULL ? strtod(at + strlen(pat), NULL) : 0;
    free(pat);
    buf_free(&text);
    return v;
}

static void test_batch_of_two_users(void **state)
{
    (void)state;
    struct fx *f = fx_new("0");
    uint32_t uid;
    uint64_t a = save(f, "alice", 1000, &uid) + save(f, "alice", 500, &uid);
    uint64_t b = save(f, "bob", 700, &uid);
    assert_int_equal(mirrored(f, "m", "alice", QUOTA_CLONE_KEY_STORAGE), -1);
    run_for(f, 100);
    for (int d = 0; d < 2; d++) {
        const char *name = d == 0 ? "m" : "f";
        assert_int_equal(mirrored(f, name, "alice", QUOTA_CLONE_KEY_STORAGE), (int64_t)a);
        assert_int_equal(mirrored(f, name, "alice", QUOTA_CLONE_KEY_MESSAGES), 2);
        assert_int_equal(mirrored(f, name, "bob", QUOTA_CLONE_KEY_STORAGE), (int64_t)b);
        assert_int_equal(mirrored(f, name, "bob", QUOTA_CLONE_KEY_MESSAGES), 1);
        /* One write per user (the transaction carried both users' keys). */
        assert_true(writes(f, name) == 2.0);
    }
    fx_free(f);
}

static void test_delay_and_final_write(void **state)
{
    (void)state;
    struct fx *f = fx_new("60s");
    struct petrel_error err = {0};
    struct mail_user *u = mail_user_get(f->storage, "carol", &err);
    mail_user_ref(u); /* a session holds the user */
    uint32_t uid;
    uint64_t c = save(f, "carol", 800, &uid);
    run_for(f, 100);
    assert_int_equal(mirrored(f, "m", "carol", QUOTA_CLONE_KEY_STORAGE), -1); /* delay */
    mail_user_unref(u);                                                       /* session ends */
    run_for(f, 100);
    assert_int_equal(mirrored(f, "m", "carol", QUOTA_CLONE_KEY_STORAGE), (int64_t)c);
    assert_int_equal(mirrored(f, "f", "carol", QUOTA_CLONE_KEY_MESSAGES), 1);
    /* A session that ends with nothing changed writes nothing. */
    mail_user_ref(u);
    mail_user_unref(u);
    run_for(f, 100);
    assert_true(writes(f, "m") == 1.0);
    /* An expunge lowers the mirror (written at the session's end). */
    mail_user_ref(u);
    const struct namespace_config *ns = mail_user_namespace(u, "personal", &err);
    struct mailbox *box = mailbox_open(u, ns, "INBOX", &err);
    assert_true(mailbox_set_flags(box, uid, MAIL_FLAG_DELETED, NULL, &err));
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    assert_true(mailbox_expunge(box, NULL, 0, &gone, &gone_count, &err));
    assert_int_equal(gone_count, 1);
    free(gone);
    mailbox_close(box);
    mail_user_unref(u);
    run_for(f, 100);
    assert_int_equal(mirrored(f, "m", "carol", QUOTA_CLONE_KEY_STORAGE), 0);
    assert_int_equal(mirrored(f, "m", "carol", QUOTA_CLONE_KEY_MESSAGES), 0);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_value),
        cmocka_unit_test(test_batch_of_two_users),
        cmocka_unit_test(test_delay_and_final_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
