/* Unit tests for the quota storage module (storage/quota/quota-module.h)
 * over the real maildir driver: the effective limit as a save meets it
 * (interactive without grace, delivery with it, percentages and extra),
 * the permanent refusals (quota_mail_size, quota_mailbox_message_count),
 * a reservation given back when a later module says no, and threads with
 * sibling handles of one user appending at once never passing the limit
 * together (the reservation). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/xalloc.h"
#include "storage/fileindex/fileindex.h" /* FILEINDEX_FSYNC_NEVER */
#include "storage/mail-storage-module.h"
#include "storage/mail-storage.h"
#include "storage/quota/quota-module.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fixture {
    char dir[64];
    struct mail_config cfg;
    struct quota_config qcfg;
    struct event_base *base;
    struct quota_module *qm;
    struct mail_storage *storage;
};

static int setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/petrel-quota-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    struct petrel_error err;
    assert_true(mail_config_read(NULL, NULL, &f->cfg, &err));
    free(f->cfg.home);
    f->cfg.home = xasprintf("%s/%%u", f->dir);
    f->cfg.fsync = FILEINDEX_FSYNC_NEVER;
    quota_config_defaults(&f->qcfg);
    f->qcfg.enabled = true;
    f->qcfg.storage_grace = 1000;
    f->base = event_base_new();
    *state = f;
    return 0;
}

/* After the test has set f->qcfg: the storage with the module. */
static void start(struct fixture *f)
{
    struct petrel_error err;
    f->storage = mail_storage_new(&f->cfg, NULL);
    f->qm = quota_module_new(&f->qcfg, f->base, NULL);
    assert_true(quota_module_register(f->qm, f->storage, &err));
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mail_storage_free(f->storage);
    quota_module_free(f->qm);
    event_base_free(f->base);
    quota_config_free(&f->qcfg);
    mail_config_free(&f->cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static struct mailbox *inbox(struct mail_storage *st, const char *rule)
{
    struct petrel_error err;
    struct mail_user *u = mail_user_get(st, "alice", &err);
    assert_non_null(u);
    char *fields[] = {(char *)rule, NULL};
    quota_user_set(u, rule != NULL ? fields : NULL);
    const struct namespace_config *ns = mail_user_namespace(u, "personal", &err);
    struct mailbox *box = mailbox_open(u, ns, "INBOX", &err);
    assert_non_null(box);
    return box;
}

/* `n` bytes of a message. */
static bool put(struct mailbox *box, size_t n, struct petrel_error *err)
{
    char *m = xmalloc(n);
    memset(m, 'x', n);
    memcpy(m, "Subject: q\r\n\r\n", 14);
    bool ok = mailbox_append(box, m, n, 0, NULL, 0, NULL, err);
    free(m);
    return ok;
}

static void test_limit_at_save(void **state)
{
    struct fixture *f = *state;
    f->qcfg.storage_percentage = 50;
    f->qcfg.storage_extra = 100;
    start(f);
    /* 2000 x 50 % + 100 = 1100 interactive, + 1000 grace on delivery */
    struct mailbox *box = inbox(f->storage, "*:storage=2000");
    struct petrel_error err;
    assert_true(put(box, 600, &err));
    assert_true(put(box, 500, &err)); /* 1100: exactly the limit */
    assert_false(put(box, 20, &err));
    assert_int_equal(err.code, PETREL_ERR_OVER_QUOTA);
    assert_false(err.permanent);
    assert_string_equal(err.message, "Quota exceeded (mailbox for user is full)");
    mailbox_set_delivery(box, true);
    assert_true(put(box, 1000, &err));
    assert_false(put(box, 20, &err));
    mailbox_close(box);
}

static void test_permanent_refusals(void **state)
{
    struct fixture *f = *state;
    f->qcfg.mail_size = 500;
    f->qcfg.mailbox_message_count = 2;
    start(f);
    struct mailbox *box = inbox(f->storage, NULL); /* unlimited user: the caps still apply */
    struct petrel_error err;
    assert_false(put(box, 501, &err));
    assert_int_equal(err.code, PETREL_ERR_OVER_QUOTA);
    assert_true(err.permanent);
    assert_string_equal(err.message, "Requested allocation size 501 exceeds max mail size 500");
    assert_true(put(box, 500, &err));
    assert_true(put(box, 100, &err));
    assert_false(put(box, 100, &err));
    assert_true(err.permanent);
    assert_string_equal(err.message, "Too many messages in the mailbox");
    mailbox_close(box);
}

/* A module after the quota that refuses saves of exactly 777 bytes. */
static bool veto_save(void *ctx, const struct mail_save_info *info, struct petrel_error *err)
{
    (void)ctx;
    if (info->size == 777)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "not this one");
    return true;
}

static const struct mail_storage_module veto_module = {.name = "veto", .save = veto_save};

static void test_later_veto_gives_the_reservation_back(void **state)
{
    struct fixture *f = *state;
    start(f);
    struct petrel_error err;
    assert_true(mail_storage_module_register(f->storage, &veto_module, NULL, &err));
    struct mailbox *box = inbox(f->storage, "*:storage=1000");
    for (int i = 0; i < 5; i++) {
        assert_false(put(box, 777, &err));
        assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    }
    /* 777 still held would leave no room for 900 */
    assert_true(put(box, 900, &err));
    mailbox_close(box);
}

#define THREADS 6
#define MSG 100
#define LIMIT 5000

struct filler {
    struct mail_storage *st;
    int saved;
};

static void *fill(void *arg)
{
    struct filler *fl = arg;
    struct mailbox *box = inbox(fl->st, "*:storage=5000");
    struct petrel_error err;
    while (put(box, MSG, &err))
        fl->saved++;
    mailbox_close(box);
    return NULL;
}

/* Folders to sum over: each usage read then takes long enough for other
 * threads' saves to commit while it runs (the window the committed-since
 * count covers). */
static void make_folders(struct mail_storage *st)
{
    struct petrel_error err;
    struct mail_user *u = mail_user_get(st, "alice", &err);
    assert_non_null(u);
    const struct namespace_config *ns = mail_user_namespace(u, "personal", &err);
    for (int i = 0; i < 40; i++) {
        char name[16];
        snprintf(name, sizeof(name), "F%02d", i);
        assert_true(mail_folder_create(u, ns, name, &err));
    }
}

static void test_threads_never_pass_the_limit(void **state)
{
    struct fixture *f = *state;
    start(f);
    for (int round = 0; round < 6; round++) {
        char user_dir[128];
        snprintf(user_dir, sizeof(user_dir), "rm -rf '%s/alice'", f->dir);
        assert_int_equal(system(user_dir), 0);
        if (round % 2 == 1)
            make_folders(f->storage);
        struct filler fl[THREADS];
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) {
            fl[i] = (struct filler){.st = mail_storage_new_sibling(f->storage, NULL)};
            assert_int_equal(pthread_create(&t[i], NULL, fill, &fl[i]), 0);
        }
        int total = 0;
        for (int i = 0; i < THREADS; i++) {
            pthread_join(t[i], NULL);
            total += fl[i].saved;
            mail_storage_free(fl[i].st);
        }
        /* Never above the limit; and not far below it (a save is refused
         * only when the others' commits really use the room). */
        assert_true(total * MSG <= LIMIT);
        assert_true(total * MSG > LIMIT - THREADS * MSG);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_limit_at_save, setup, teardown),
        cmocka_unit_test_setup_teardown(test_permanent_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_later_veto_gives_the_reservation_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_threads_never_pass_the_limit, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
