/* Unit tests for the storage modules' hook contract (storage/
 * mail-storage-module.h) over the real maildir driver: every operation runs
 * its hooks, before-hooks in registration order and after-hooks innermost
 * first, a veto stops the later modules and the driver before anything is
 * written, a failed folder_created undoes the folder and tells the modules
 * already told, mailbox_append_undo() takes out what a MULTIAPPEND saved
 * even when a module would refuse an expunge, a refusal's text is one line
 * (it becomes a reply), and the special-use module (the storage's own,
 * registered first) follows renames and deletions. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/fs-util.h"
#include "core/xalloc.h"
#include "storage/mail-storage-module.h"
#include "storage/mail-storage.h"
#include "storage/fileindex/fileindex.h" /* FILEINDEX_FSYNC_NEVER */
#include "storage/special-use.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A module that writes "<name>:<hook> " to a log for each hook and says no
 * at the hook named `veto`. */
struct recorder {
    const char *name;
    const char *veto;
    struct buf *log;
};

static bool note(struct recorder *r, const char *hook, struct petrel_error *err)
{
    buf_printf(r->log, "%s:%s ", r->name, hook);
    if (r->veto != NULL && strcmp(r->veto, hook) == 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "%s refuses %s", r->name, hook);
    return true;
}

static bool r_folder_create(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                            const char *name, struct mail_folder_create_params *params,
                            struct petrel_error *err)
{
    (void)user, (void)ns, (void)name, (void)params;
    return note(ctx, "folder_create", err);
}

static bool r_folder_created(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                             const char *name, struct mail_folder_create_params *params,
                             struct petrel_error *err)
{
    (void)user, (void)ns, (void)name, (void)params;
    return note(ctx, "folder_created", err);
}

static bool r_folder_delete(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                            const char *name, struct petrel_error *err)
{
    (void)user, (void)ns, (void)name;
    return note(ctx, "folder_delete", err);
}

static void r_folder_deleted(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                             const char *name)
{
    (void)user, (void)ns, (void)name;
    note(ctx, "folder_deleted", NULL);
}

static bool r_folder_rename(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                            const char *old_name, const char *new_name, struct petrel_error *err)
{
    (void)user, (void)ns, (void)old_name, (void)new_name;
    return note(ctx, "folder_rename", err);
}

static void r_folder_renamed(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                             const char *old_name, const char *new_name)
{
    (void)user, (void)ns, (void)old_name, (void)new_name;
    note(ctx, "folder_renamed", NULL);
}

static bool r_mailbox_open(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                           const char *name, struct petrel_error *err)
{
    (void)user, (void)ns, (void)name;
    return note(ctx, "open", err);
}

static bool r_save(void *ctx, const struct mail_save_info *info, struct petrel_error *err)
{
    struct recorder *r = ctx;
    static const char *const kinds[] = {"append", "copy", "move"};
    buf_printf(r->log, "%s:save(%s,%zu,%llu) ", r->name, kinds[info->kind], info->count,
               (unsigned long long)info->size);
    if (r->veto != NULL && strcmp(r->veto, "save") == 0)
        return petrel_error_set(err, PETREL_ERR_OVER_QUOTA, "%s refuses the save", r->name);
    return true;
}

static void r_saved(void *ctx, const struct mail_save_info *info, const uint32_t *uids,
                    size_t count)
{
    (void)info, (void)uids, (void)count;
    note(ctx, "saved", NULL);
}

static bool r_expunge(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                      struct petrel_error *err)
{
    (void)box, (void)uids, (void)uid_count;
    return note(ctx, "expunge", err);
}

static void r_expunged(void *ctx, struct mailbox *box, const uint32_t *uids, size_t count)
{
    struct recorder *r = ctx;
    (void)box, (void)uids;
    buf_printf(r->log, "%s:expunged(%zu) ", r->name, count);
}

static bool r_flags(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                    const struct mailbox_flags_update *upd, struct petrel_error *err)
{
    (void)box, (void)uids, (void)uid_count, (void)upd;
    return note(ctx, "flags", err);
}

static const struct mail_storage_module recorder_module = {
    .name = "recorder",
    .folder_create = r_folder_create,
    .folder_created = r_folder_created,
    .folder_delete = r_folder_delete,
    .folder_deleted = r_folder_deleted,
    .folder_rename = r_folder_rename,
    .folder_renamed = r_folder_renamed,
    .mailbox_open = r_mailbox_open,
    .save = r_save,
    .saved = r_saved,
    .expunge = r_expunge,
    .expunged = r_expunged,
    .flags = r_flags,
};

struct fixture {
    char dir[64];
    struct mail_config cfg;
    struct mail_storage *storage;
    struct mail_user *user;
    const struct namespace_config *ns;
    struct buf log;
    struct recorder a;
    struct recorder b;
};

static const char msg[] = "From: a@example.org\r\nSubject: hooks\r\n\r\nbody\r\n";

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
    f->a = (struct recorder){.name = "A", .log = &f->log};
    f->b = (struct recorder){.name = "B", .log = &f->log};
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
    buf_free(&f->log);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

/* The log since the last call, as a string the caller frees. */
static char *take_log(struct fixture *f)
{
    char *s = xstrdup(f->log.len > 0 ? buf_cstr(&f->log) : "");
    buf_reset(&f->log);
    return s;
}

#define assert_log(f, expected)                                                                    \
    do {                                                                                           \
        char *got_ = take_log(f);                                                                  \
        assert_string_equal(got_, expected);                                                       \
        free(got_);                                                                                \
    } while (0)

static struct mailbox *open_box(struct fixture *f, const char *name)
{
    struct petrel_error err;
    struct mailbox *box = mailbox_open(f->user, f->ns, name, &err);
    if (box == NULL)
        fail_msg("open %s: %s", name, err.message);
    return box;
}

static uint32_t count_messages(struct mailbox *box)
{
    struct petrel_error err;
    struct mailbox_info info;
    assert_true(mailbox_sync(box, &err));
    assert_true(mailbox_get_info(box, false, &info, &err));
    return info.messages;
}

/* Files in tmp/, new/ and cur/ of the folder (INBOX: ""). */
static size_t files_on_disk(struct fixture *f, const char *folder)
{
    size_t n = 0;
    static const char *const subs[] = {"tmp", "new", "cur"};
    for (size_t i = 0; i < 3; i++) {
        char *path =
            xasprintf("%s/alice/Maildir%s%s/%s", f->dir, *folder ? "/." : "", folder, subs[i]);
        DIR *d = opendir(path);
        if (d != NULL) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL)
                n += e->d_name[0] != '.';
            closedir(d);
        }
        free(path);
    }
    return n;
}

static uint32_t message_flags(struct mailbox *box, uint32_t uid)
{
    struct petrel_error err;
    struct mailbox_view *view = mailbox_view_new(box, &err);
    assert_non_null(view);
    uint32_t seq = mailbox_view_seq(view, uid);
    assert_true(seq > 0);
    uint32_t flags = mailbox_view_at(view, seq)->flags;
    mailbox_view_free(view);
    return flags;
}

/* Every operation runs its hooks: before in order (A, B), after innermost
 * first (B, A), with what a quota needs to know. */
static void test_every_operation_in_order(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->user, f->ns, "Work", &err));
    assert_log(f, "A:folder_create B:folder_create B:folder_created A:folder_created ");
    assert_true(mail_folder_rename(f->user, f->ns, "Work", "Job", &err));
    assert_log(f, "A:folder_rename B:folder_rename B:folder_renamed A:folder_renamed ");

    struct mailbox *inbox = open_box(f, "INBOX");
    struct mailbox *job = open_box(f, "Job");
    assert_log(f, "A:open B:open A:open B:open ");

    uint32_t uid = 0;
    assert_true(mailbox_append(inbox, msg, strlen(msg), 0, NULL, 0, &uid, &err));
    char expect[256];
    snprintf(expect, sizeof(expect), "A:save(append,1,%zu) B:save(append,1,%zu) B:saved A:saved ",
             strlen(msg), strlen(msg));
    assert_log(f, expect);

    char *spool_path = xasprintf("%s/spool", f->dir);
    assert_true(fs_write_atomic(spool_path, msg, strlen(msg), false, &err));
    FILE *spool = fopen(spool_path, "rb");
    assert_non_null(spool);
    uint32_t uid2 = 0;
    assert_true(mailbox_append_file(inbox, "X: 1\r\n", 6, fileno(spool), 0, strlen(msg), 0, NULL, 0,
                                    &uid2, &err));
    fclose(spool);
    free(spool_path);
    snprintf(expect, sizeof(expect), "A:save(append,1,%zu) B:save(append,1,%zu) B:saved A:saved ",
             strlen(msg) + 6, strlen(msg) + 6);
    assert_log(f, expect);

    uint32_t *new_uids = NULL;
    assert_true(mailbox_copy(inbox, &uid, 1, job, true, &new_uids, &err));
    free(new_uids);
    snprintf(expect, sizeof(expect), "A:save(copy,1,%zu) B:save(copy,1,%zu) B:saved A:saved ",
             strlen(msg), strlen(msg));
    assert_log(f, expect);
    assert_true(mailbox_move(inbox, &uid2, 1, job, &new_uids, &err));
    free(new_uids);
    /* The source side of a MOVE is the save's (no flags/expunge hooks). */
    snprintf(expect, sizeof(expect), "A:save(move,1,%zu) B:save(move,1,%zu) B:saved A:saved ",
             strlen(msg) + 6, strlen(msg) + 6);
    assert_log(f, expect);
    assert_int_equal(count_messages(inbox), 1);
    assert_int_equal(count_messages(job), 2);

    const struct mailbox_flags_update del = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DELETED};
    assert_true(mailbox_update_flags(inbox, &uid, 1, &del, NULL, NULL, NULL, NULL, &err));
    assert_log(f, "A:flags B:flags ");
    assert_true(mailbox_set_flags(inbox, uid, MAIL_FLAG_DELETED | MAIL_FLAG_SEEN, NULL, &err));
    assert_log(f, "A:flags B:flags ");
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    assert_true(mailbox_expunge(inbox, NULL, 0, &gone, &gone_count, &err));
    free(gone);
    assert_int_equal(gone_count, 1);
    assert_log(f, "A:expunge B:expunge B:expunged(1) A:expunged(1) ");

    mailbox_close(inbox);
    mailbox_close(job);
    assert_true(mail_folder_delete(f->user, f->ns, "Job", &err));
    assert_log(f, "A:folder_delete B:folder_delete B:folder_deleted A:folder_deleted ");
}

/* A veto of the first module: the second is not asked, the driver not
 * called, nothing written; the module's error is the caller's. */
static void test_veto_stops_everything(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->user, f->ns, "Kept", &err));
    struct mailbox *inbox = open_box(f, "INBOX");
    struct mailbox *kept = open_box(f, "Kept");
    uint32_t uid = 0;
    assert_true(mailbox_append(inbox, msg, strlen(msg), 0, NULL, 0, &uid, &err));
    free(take_log(f));
    size_t inbox_files = files_on_disk(f, "");

    f->a.veto = "save";
    assert_false(mailbox_append(inbox, msg, strlen(msg), 0, NULL, 0, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_OVER_QUOTA);
    assert_log(f, "A:save(append,1,45) ");
    uint32_t *new_uids = (uint32_t *)1;
    assert_false(mailbox_copy(inbox, &uid, 1, kept, true, &new_uids, &err));
    assert_null(new_uids);
    assert_int_equal(err.code, PETREL_ERR_OVER_QUOTA);
    assert_false(mailbox_move(inbox, &uid, 1, kept, &new_uids, &err));
    assert_int_equal(err.code, PETREL_ERR_OVER_QUOTA);
    assert_log(f, "A:save(copy,1,45) A:save(move,1,45) ");
    assert_int_equal(count_messages(inbox), 1);
    assert_int_equal(count_messages(kept), 0);
    assert_int_equal(files_on_disk(f, ""), inbox_files);
    assert_int_equal(files_on_disk(f, "Kept"), 0);
    assert_int_equal(message_flags(inbox, uid) & MAIL_FLAG_DELETED, 0);

    /* The second module's veto: the first was asked, nobody told "saved". */
    f->a.veto = NULL;
    f->b.veto = "save";
    assert_false(mailbox_append(kept, msg, strlen(msg), 0, NULL, 0, NULL, &err));
    assert_log(f, "A:save(append,1,45) B:save(append,1,45) ");
    assert_int_equal(count_messages(kept), 0);
    assert_int_equal(files_on_disk(f, "Kept"), 0);
    f->b.veto = NULL;

    f->a.veto = "flags";
    const struct mailbox_flags_update del = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DELETED};
    assert_false(mailbox_update_flags(inbox, &uid, 1, &del, NULL, NULL, NULL, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_false(mailbox_set_flags(inbox, uid, MAIL_FLAG_DELETED, NULL, &err));
    assert_log(f, "A:flags A:flags ");
    assert_int_equal(message_flags(inbox, uid) & MAIL_FLAG_DELETED, 0);

    f->a.veto = NULL;
    assert_true(mailbox_update_flags(inbox, &uid, 1, &del, NULL, NULL, NULL, NULL, &err));
    free(take_log(f));
    f->a.veto = "expunge";
    uint32_t *gone = (uint32_t *)1;
    size_t gone_count = 7;
    assert_false(mailbox_expunge(inbox, NULL, 0, &gone, &gone_count, &err));
    assert_null(gone);
    assert_int_equal(gone_count, 0);
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_log(f, "A:expunge ");
    assert_int_equal(count_messages(inbox), 1);

    f->a.veto = "open";
    assert_null(mailbox_open(f->user, f->ns, "Kept", &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_log(f, "A:open ");

    f->a.veto = "folder_create";
    assert_false(mail_folder_create(f->user, f->ns, "New", &err));
    assert_false(mail_folder_exists(f->user, f->ns, "New"));
    f->a.veto = "folder_rename";
    assert_false(mail_folder_rename(f->user, f->ns, "Kept", "Moved", &err));
    assert_true(mail_folder_exists(f->user, f->ns, "Kept"));
    assert_false(mail_folder_exists(f->user, f->ns, "Moved"));
    f->a.veto = "folder_delete";
    assert_false(mail_folder_delete(f->user, f->ns, "Kept", &err));
    assert_true(mail_folder_exists(f->user, f->ns, "Kept"));
    assert_log(f, "A:folder_create A:folder_rename A:folder_delete ");
    f->a.veto = NULL;
    mailbox_close(inbox);
    mailbox_close(kept);
}

/* A module that cannot give what a creation asked for: the folder goes
 * again, and the modules told it was created hear it was deleted. */
static void test_failed_creation_undone(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    f->a.veto = "folder_created";
    assert_false(mail_folder_create(f->user, f->ns, "Half", &err));
    assert_int_equal(err.code, PETREL_ERR_PERMISSION);
    assert_false(mail_folder_exists(f->user, f->ns, "Half"));
    assert_log(f, "A:folder_create B:folder_create B:folder_created A:folder_created "
                  "B:folder_deleted ");
    f->a.veto = NULL;
    /* The name is free again. */
    assert_true(mail_folder_create(f->user, f->ns, "Half", &err));
}

/* A MULTIAPPEND failing part way takes out what it saved, even from a
 * module that refuses flag changes and expunges (appending does not need
 * those rights); the modules hear of the expunge. */
static void test_append_undo_not_vetoed(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct mailbox *inbox = open_box(f, "INBOX");
    uint32_t uids[2];
    assert_true(mailbox_append(inbox, msg, strlen(msg), 0, NULL, 0, &uids[0], &err));
    assert_true(mailbox_append(inbox, msg, strlen(msg), 0, NULL, 0, &uids[1], &err));
    free(take_log(f));
    f->a.veto = "flags";
    f->b.veto = "expunge";
    assert_true(mailbox_append_undo(inbox, uids, 2, &err));
    assert_log(f, "B:expunged(2) A:expunged(2) ");
    assert_int_equal(count_messages(inbox), 0);
    assert_int_equal(files_on_disk(f, ""), 0);
    f->a.veto = NULL;
    f->b.veto = NULL;
    mailbox_close(inbox);
}

/* A refusal's text becomes a reply line (IMAP NO, LMTP 452): whatever the
 * module wrote, no CR, LF or other control character reaches the client. */
static void test_veto_text_is_one_line(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    f->a.name = "A\r\n* BYE\tinjected";
    f->a.veto = "save";
    struct mailbox *inbox = open_box(f, "INBOX");
    assert_false(mailbox_append(inbox, msg, strlen(msg), 0, NULL, 0, NULL, &err));
    assert_string_equal(err.message, "A  * BYE injected refuses the save");
    f->a.veto = "open";
    assert_null(mailbox_open(f->user, f->ns, "INBOX", &err));
    assert_null(strpbrk(err.message, "\r\n\t"));
    f->a.veto = "folder_create";
    assert_false(mail_folder_create(f->user, f->ns, "X", &err));
    assert_null(strpbrk(err.message, "\r\n\t"));
    f->a.veto = "folder_created";
    assert_false(mail_folder_create(f->user, f->ns, "Y", &err));
    assert_null(strpbrk(err.message, "\r\n\t"));
    f->a.veto = NULL;
    mailbox_close(inbox);
}

static const char *attr_of(struct fixture *f, const char *folder)
{
    static char out[64];
    struct petrel_error err;
    const char *attr = NULL;
    enum special_use_source source;
    struct special_use_list scratch = {0};
    assert_true(special_use_get(f->user, folder, &attr, &source, &scratch, &err));
    snprintf(out, sizeof(out), "%s", attr != NULL ? attr : "");
    special_use_list_free(&scratch);
    return out;
}

/* The storage's own module: the special use a folder is created with
 * follows its rename (children too) and goes with its deletion, whoever
 * asks; one refused at creation leaves no folder. */
static void test_special_use_module(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct mail_folder_create_params params = {.special_use = "\\Archive"};
    assert_true(mail_folder_create_with(f->user, f->ns, "Old", &params, &err));
    assert_false(params.special_use_failed);
    params = (struct mail_folder_create_params){.special_use = "\\Flagged"};
    assert_true(mail_folder_create_with(f->user, f->ns, "Old/Sub", &params, &err));
    assert_string_equal(attr_of(f, "Old"), "\\Archive");
    assert_true(mail_folder_rename(f->user, f->ns, "Old", "New", &err));
    assert_string_equal(attr_of(f, "New"), "\\Archive");
    assert_string_equal(attr_of(f, "New/Sub"), "\\Flagged");
    assert_string_equal(attr_of(f, "Old"), "");
    assert_string_equal(attr_of(f, "Old/Sub"), "");
    assert_true(mail_folder_delete(f->user, f->ns, "New", &err));
    /* A folder of the name again starts without the old attribute. */
    assert_true(mail_folder_create(f->user, f->ns, "New", &err));
    assert_string_equal(attr_of(f, "New"), "");

    params = (struct mail_folder_create_params){.special_use = "\\Bogus"};
    assert_false(mail_folder_create_with(f->user, f->ns, "Bad", &params, &err));
    assert_true(params.special_use_failed);
    assert_false(mail_folder_exists(f->user, f->ns, "Bad"));
    /* Refused before the driver: the later modules were not asked. */
    free(take_log(f));
    params = (struct mail_folder_create_params){.special_use = "\\Bogus"};
    assert_false(mail_folder_create_with(f->user, f->ns, "Bad", &params, &err));
    assert_log(f, "");
}

/* A sibling handle (another thread's: IMAP workers, LMTP delivery threads)
 * runs the same modules, after the storage's own special-use module. */
static void test_sibling_carries_modules(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct mail_storage *sib = mail_storage_new_sibling(f->storage, NULL);
    struct mail_user *u = mail_user_get(sib, "alice", &err);
    assert_non_null(u);
    struct mail_folder_create_params params = {.special_use = "\\Archive"};
    assert_true(mail_folder_create_with(u, f->ns, "Kept", &params, &err));
    assert_log(f, "A:folder_create B:folder_create B:folder_created A:folder_created ");
    const char *attr = NULL;
    enum special_use_source source;
    struct special_use_list scratch;
    assert_true(special_use_get(u, "Kept", &attr, &source, &scratch, &err));
    assert_string_equal(attr, "\\Archive");
    special_use_list_free(&scratch);
    mail_storage_free(sib);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_every_operation_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_veto_stops_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_creation_undone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_undo_not_vetoed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_special_use_module, setup, teardown),
        cmocka_unit_test_setup_teardown(test_veto_text_is_one_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sibling_carries_modules, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
