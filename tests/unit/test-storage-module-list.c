/* Unit tests for storage modules (storage/mail-storage-module.h) on a real
 * maildir store: hooks before an operation run in registration order and
 * stop at the first veto, before the driver writes anything; hooks after it
 * run in reverse order; the save hook learns the kind, the folders, the
 * count and the size; an ACL-shaped module vetoes expunges and flag
 * changes; siblings (IMAP workers, LMTP threads) carry the parent's list. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/xalloc.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage-module.h"
#include "storage/mail-storage.h"
#include "storage/special-use.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the recording modules saw, in order: "<module>:<hook>". */
struct journal {
    char lines[64][48];
    size_t count;
    bool veto_save;    /* module "b" refuses saves */
    bool veto_expunge; /* module "b" refuses expunges */
    bool veto_seen;    /* module "b" refuses \Seen changes (an ACL's 's' right) */
    bool veto_create;  /* module "b" refuses folder creation */
    struct mail_save_info last_save;
};

struct recorder {
    const char *name;
    struct journal *j;
};

static void note(struct recorder *r, const char *hook)
{
    struct journal *j = r->j;
    assert_true(j->count < 64);
    snprintf(j->lines[j->count++], sizeof(j->lines[0]), "%s:%s", r->name, hook);
}

static bool is_b(const struct recorder *r)
{
    return strcmp(r->name, "b") == 0;
}

static bool rec_folder_create(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                              const char *name, struct mail_folder_create_params *params,
                              struct petrel_error *err)
{
    struct recorder *r = ctx;
    note(r, "folder_create");
    if (is_b(r) && r->j->veto_create)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "no create right");
    return true;
}

static bool rec_folder_created(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                               const char *name, struct mail_folder_create_params *params,
                               struct petrel_error *err)
{
    note(ctx, "folder_created");
    return true;
}

static void rec_folder_renamed(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                               const char *old_name, const char *new_name)
{
    note(ctx, "folder_renamed");
}

static void rec_folder_deleted(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                               const char *name)
{
    note(ctx, "folder_deleted");
}

static bool rec_save(void *ctx, const struct mail_save_info *info, struct petrel_error *err)
{
    struct recorder *r = ctx;
    note(r, "save");
    r->j->last_save = *info;
    if (is_b(r) && r->j->veto_save)
        return petrel_error_set(err, PETREL_ERR_OVER_QUOTA, "over quota");
    return true;
}

static void rec_saved(void *ctx, const struct mail_save_info *info, const uint32_t *uids,
                      size_t count)
{
    note(ctx, "saved");
}

static bool rec_expunge(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                        struct petrel_error *err)
{
    struct recorder *r = ctx;
    note(r, "expunge");
    if (is_b(r) && r->j->veto_expunge)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "no expunge right");
    return true;
}

static void rec_expunged(void *ctx, struct mailbox *box, const uint32_t *uids, size_t count)
{
    note(ctx, "expunged");
}

static bool rec_flags(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                      const struct mailbox_flags_update *upd, struct petrel_error *err)
{
    struct recorder *r = ctx;
    note(r, "flags");
    if (is_b(r) && r->j->veto_seen && (upd->flags & MAIL_FLAG_SEEN) != 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "no seen right");
    return true;
}

static const struct mail_storage_module recorder_module = {
    .name = "recorder",
    .folder_create = rec_folder_create,
    .folder_created = rec_folder_created,
    .folder_deleted = rec_folder_deleted,
    .folder_renamed = rec_folder_renamed,
    .save = rec_save,
    .saved = rec_saved,
    .expunge = rec_expunge,
    .expunged = rec_expunged,
    .flags = rec_flags,
};

struct fixture {
    char dir[64];
    struct mail_config cfg;
    struct mail_storage *storage;
    struct mail_user *user;
    const struct namespace_config *ns;
    struct journal j;
    struct recorder a, b;
};

static int setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/petrel-modules-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    struct petrel_error err;
    assert_true(mail_config_read(NULL, NULL, &f->cfg, &err));
    free(f->cfg.home);
    f->cfg.home = xasprintf("%s/%%u", f->dir);
    f->cfg.fsync = FILEINDEX_FSYNC_NEVER;
    f->storage = mail_storage_new(&f->cfg, NULL);
    f->a = (struct recorder){.name = "a", .j = &f->j};
    f->b = (struct recorder){.name = "b", .j = &f->j};
    assert_true(mail_storage_module_register(f->storage, &recorder_module, &f->a, &err));
    assert_true(mail_storage_module_register(f->storage, &recorder_module, &f->b, &err));
    f->user = mail_user_get(f->storage, "alice", &err);
    assert_non_null(f->user);
    f->ns = mail_user_namespace(f->user, "personal", &err);
    assert_non_null(f->ns);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    mail_storage_free(f->storage);
    mail_config_free(&f->cfg);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

static void expect(struct fixture *f, const char *const *want)
{
    size_t n = 0;
    while (want[n] != NULL)
        n++;
    for (size_t i = 0; i < n && i < f->j.count; i++)
        assert_string_equal(f->j.lines[i], want[i]);
    assert_int_equal(f->j.count, n);
    f->j.count = 0;
}

static const char msg[] = "From: a@example.org\r\nSubject: x\r\n\r\nbody\r\n";

static uint32_t count_messages(struct fixture *f, const char *folder)
{
    struct petrel_error err;
    struct mailbox *box = mailbox_open(f->user, f->ns, folder, &err);
    assert_non_null(box);
    struct mailbox_info info;
    assert_true(mailbox_get_info(box, false, &info, &err));
    mailbox_close(box);
    return info.messages;
}

static void test_folder_hooks_in_order(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->user, f->ns, "Work", &err));
    expect(f, (const char *[]){"a:folder_create", "b:folder_create", "b:folder_created",
                               "a:folder_created", NULL});
    assert_true(mail_folder_rename(f->user, f->ns, "Work", "Job", &err));
    expect(f, (const char *[]){"b:folder_renamed", "a:folder_renamed", NULL});
    assert_true(mail_folder_delete(f->user, f->ns, "Job", &err));
    expect(f, (const char *[]){"b:folder_deleted", "a:folder_deleted", NULL});
    /* A veto before the create: no folder, and "after" hooks never run. */
    f->j.veto_create = true;
    assert_false(mail_folder_create(f->user, f->ns, "Denied", &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    expect(f, (const char *[]){"a:folder_create", "b:folder_create", NULL});
    assert_false(mail_folder_exists(f->user, f->ns, "Denied"));
}

static void test_save_veto_writes_nothing(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct mailbox *box = mailbox_open(f->user, f->ns, "INBOX", &err);
    assert_non_null(box);
    uint32_t uid = 0;
    assert_true(mailbox_append(box, msg, sizeof(msg) - 1, 0, NULL, 0, &uid, &err));
    expect(f, (const char *[]){"a:save", "b:save", "b:saved", "a:saved", NULL});
    assert_int_equal(f->j.last_save.kind, MAIL_SAVE_APPEND);
    assert_int_equal(f->j.last_save.size, sizeof(msg) - 1);
    assert_int_equal(f->j.last_save.count, 1);
    assert_ptr_equal(f->j.last_save.dst, box);

    f->j.veto_save = true;
    uint32_t none = 0;
    assert_false(mailbox_append(box, msg, sizeof(msg) - 1, 0, NULL, 0, &none, &err));
    assert_int_equal(err.code, PETREL_ERR_OVER_QUOTA);
    assert_int_equal(none, 0);
    expect(f, (const char *[]){"a:save", "b:save", NULL});

    /* COPY and MOVE: the size comes from the index; nothing reaches Dst,
     * and a refused MOVE leaves the source alone. */
    f->j.veto_save = false;
    assert_true(mail_folder_create(f->user, f->ns, "Dst", &err));
    f->j.count = 0;
    f->j.veto_save = true;
    struct mailbox *dst = mailbox_open(f->user, f->ns, "Dst", &err);
    assert_non_null(dst);
    uint32_t *new_uids = NULL;
    assert_false(mailbox_copy(box, &uid, 1, dst, true, &new_uids, &err));
    assert_int_equal(err.code, PETREL_ERR_OVER_QUOTA);
    assert_null(new_uids);
    assert_int_equal(f->j.last_save.kind, MAIL_SAVE_COPY);
    assert_ptr_equal(f->j.last_save.src, box);
    assert_int_equal(f->j.last_save.size, sizeof(msg) - 1);
    assert_false(mailbox_move(box, &uid, 1, dst, &new_uids, &err));
    assert_int_equal(f->j.last_save.kind, MAIL_SAVE_MOVE);
    expect(f, (const char *[]){"a:save", "b:save", "a:save", "b:save", NULL});
    mailbox_close(dst);
    mailbox_close(box);
    assert_int_equal(count_messages(f, "Dst"), 0);
    assert_int_equal(count_messages(f, "INBOX"), 1);

    /* Allowed again: the move goes through, told in reverse order. */
    f->j.veto_save = false;
    box = mailbox_open(f->user, f->ns, "INBOX", &err);
    dst = mailbox_open(f->user, f->ns, "Dst", &err);
    f->j.count = 0;
    assert_true(mailbox_move(box, &uid, 1, dst, &new_uids, &err));
    assert_int_not_equal(new_uids[0], 0);
    free(new_uids);
    expect(f, (const char *[]){"a:save", "b:save", "b:saved", "a:saved", NULL});
    mailbox_close(dst);
    mailbox_close(box);
    assert_int_equal(count_messages(f, "Dst"), 1);
    assert_int_equal(count_messages(f, "INBOX"), 0);
}

/* The shape of an ACL module: rights per operation. */
static void test_expunge_and_flag_vetoes(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct mailbox *box = mailbox_open(f->user, f->ns, "INBOX", &err);
    assert_non_null(box);
    uint32_t uid = 0;
    assert_true(mailbox_append(box, msg, sizeof(msg) - 1, 0, NULL, 0, &uid, &err));
    f->j.count = 0;

    f->j.veto_seen = true;
    const struct mailbox_flags_update seen = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_SEEN};
    assert_false(mailbox_update_flags(box, &uid, 1, &seen, NULL, NULL, NULL, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_false(mailbox_set_flags(box, uid, MAIL_FLAG_SEEN, NULL, &err));
    const struct mailbox_flags_update del = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DELETED};
    assert_true(mailbox_update_flags(box, &uid, 1, &del, NULL, NULL, NULL, NULL, &err));
    expect(f, (const char *[]){"a:flags", "b:flags", "a:flags", "b:flags", "a:flags", "b:flags",
                               NULL});

    f->j.veto_expunge = true;
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    assert_false(mailbox_expunge(box, NULL, 0, &gone, &gone_count, &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_int_equal(gone_count, 0);
    assert_null(gone);
    f->j.veto_expunge = false;
    assert_true(mailbox_expunge(box, NULL, 0, &gone, &gone_count, &err));
    assert_int_equal(gone_count, 1);
    free(gone);
    expect(f, (const char *[]){"a:expunge", "b:expunge", "a:expunge", "b:expunge", "b:expunged",
                               "a:expunged", NULL});
    mailbox_close(box);
}

/* A sibling handle (another thread's) runs the same modules, after the
 * storage's own special-use module. */
static void test_sibling_carries_modules(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct mail_storage *sib = mail_storage_new_sibling(f->storage, NULL);
    struct mail_user *u = mail_user_get(sib, "alice", &err);
    assert_non_null(u);
    struct mail_folder_create_params params = {.special_use = "\\Archive"};
    assert_true(mail_folder_create_with(u, f->ns, "Old", &params, &err));
    expect(f, (const char *[]){"a:folder_create", "b:folder_create", "b:folder_created",
                               "a:folder_created", NULL});
    const char *attr = NULL;
    enum special_use_source source;
    struct special_use_list scratch;
    assert_true(special_use_get(u, "Old", &attr, &source, &scratch, &err));
    assert_string_equal(attr, "\\Archive");
    special_use_list_free(&scratch);
    mail_storage_free(sib);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_folder_hooks_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_veto_writes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expunge_and_flag_vetoes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sibling_carries_modules, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
