/* Unit tests for the IMAP-facing storage calls of storage/mail-storage.h
 * over Maildir++: reading messages (also renamed or expunged under us),
 * flag updates with modseqs and UNCHANGEDSINCE, copy and move with UIDs and
 * keywords, the session view against another process's changes, the change
 * watch (inotify and polling) and the per-message cache. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/fs-util.h"
#include "core/xalloc.h"
#include "storage/mail-storage.h"
#include "storage/fileindex/fileindex.h"

#include <dirent.h>
#include <fcntl.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct fixture {
    char dir[64];
    struct mail_config cfg;
    struct mail_storage *storage;
    struct mail_user *user;
    const struct namespace_config *ns;
};

static const char crlf_msg[] = "From: a@example.org\r\nSubject: crlf\r\n\r\nbody\r\n";
static const char lf_msg[] = "From: b@example.org\nSubject: lf\n\nbody line\nsecond\n";

static int setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/petrel-imapbox-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    struct petrel_error err;
    assert_true(mail_config_read(NULL, NULL, &f->cfg, &err));
    free(f->cfg.home);
    f->cfg.home = xasprintf("%s/%%u", f->dir);
    f->cfg.fsync = FILEINDEX_FSYNC_NEVER;
    f->storage = mail_storage_new(&f->cfg, NULL);
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

static struct mailbox *open_box(struct fixture *f, const char *name)
{
    struct petrel_error err;
    struct mailbox *box = mailbox_open(f->user, f->ns, name, &err);
    if (box == NULL)
        fail_msg("open %s: %s", name, err.message);
    return box;
}

/* A second, independent storage handle on the same files (what another
 * process has): its own index handle and caches. */
static struct mail_storage *other_storage(struct fixture *f, struct mailbox **box, const char *name)
{
    struct mail_storage *s = mail_storage_new(&f->cfg, NULL);
    struct petrel_error err;
    struct mail_user *u = mail_user_get(s, "alice", &err);
    assert_non_null(u);
    *box = mailbox_open(u, mail_user_namespace(u, "personal", &err), name, &err);
    assert_non_null(*box);
    return s;
}

static uint32_t append(struct mailbox *box, const char *text, uint32_t flags,
                       const char *const *keywords)
{
    struct petrel_error err;
    uint32_t uid = 0;
    if (!mailbox_append(box, text, strlen(text), flags, keywords, 0, &uid, &err))
        fail_msg("append: %s", err.message);
    return uid;
}

static void expunge(struct mailbox *box, uint32_t uid)
{
    struct petrel_error err;
    const struct mailbox_flags_update del = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DELETED};
    assert_true(mailbox_update_flags(box, &uid, 1, &del, NULL, NULL, NULL, NULL, &err));
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    assert_true(mailbox_expunge(box, &uid, 1, &gone, &gone_count, &err));
    assert_int_equal(gone_count, 1);
    free(gone);
}

/* The current file name of a message (from the index). */
struct find_ctx {
    uint32_t uid;
    char name[512];
    uint32_t flags;
    char keywords[256];
};

static void find_cb(const struct mailbox_message *msg, void *ctx)
{
    struct find_ctx *c = ctx;
    if (msg->uid != c->uid)
        return;
    snprintf(c->name, sizeof(c->name), "%s", msg->filename);
    c->flags = msg->flags;
    c->keywords[0] = '\0';
    for (size_t i = 0; i < msg->keyword_count; i++) {
        strcat(c->keywords, msg->keywords[i]);
        strcat(c->keywords, " ");
    }
}

static struct find_ctx find(struct mailbox *box, uint32_t uid)
{
    struct find_ctx c = {.uid = uid};
    bool truncated;
    struct petrel_error err;
    assert_true(mailbox_foreach(box, 0, find_cb, &c, &truncated, &err));
    return c;
}

static void assert_message(struct mailbox *box, uint32_t uid, const char *text,
                           enum mailbox_eol eol)
{
    struct petrel_error err;
    struct mailbox_message_data *m = mailbox_message_open(box, uid, &err);
    if (m == NULL)
        fail_msg("open uid %u: %s", uid, err.message);
    assert_int_equal(m->size, strlen(text));
    assert_memory_equal(m->data, text, m->size);
    assert_int_equal(m->eol, eol);
    assert_int_equal(m->uid, uid);
    mailbox_message_release(m);
}

/* ---------- reading ---------- */

static void test_read_messages(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    uint32_t a = append(box, crlf_msg, 0, NULL);
    uint32_t b = append(box, lf_msg, 0, NULL);
    assert_message(box, a, crlf_msg, MAILBOX_EOL_CRLF);
    assert_message(box, b, lf_msg, MAILBOX_EOL_LF);

    struct petrel_error err;
    struct mailbox_message_data *m = mailbox_message_open(box, b, &err);
    assert_non_null(m);
    assert_int_equal(m->vsize, strlen(lf_msg) + 5); /* five bare LFs */
    mailbox_message_release(m);
    uint64_t size = 0;
    uint64_t vsize = 0;
    assert_true(mailbox_message_sizes(box, b, &size, &vsize, &err));
    assert_int_equal(size, strlen(lf_msg));
    assert_int_equal(vsize, strlen(lf_msg) + 5);

    /* Large enough to be mapped rather than read; mixed line endings. */
    size_t big_len = 300 * 1024;
    char *big = xmalloc(big_len + 1);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (char)('a' + i % 26);
    memcpy(big, "X: 1\r\nY: 2\n\n", 12);
    big[big_len] = '\0';
    uint32_t c = append(box, big, 0, NULL);
    m = mailbox_message_open(box, c, &err);
    assert_non_null(m);
    assert_int_equal(m->size, big_len);
    assert_memory_equal(m->data, big, big_len);
    assert_int_equal(m->eol, MAILBOX_EOL_MIXED);
    /* The data outlives an expunge and the mailbox. */
    expunge(box, c);
    assert_null(mailbox_message_open(box, c, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    mailbox_close(box);
    assert_memory_equal(m->data, big, big_len);
    mailbox_message_release(m);
    free(big);

    box = open_box(f, "INBOX");
    assert_null(mailbox_message_open(box, 999, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_false(mailbox_message_sizes(box, 999, &size, &vsize, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    mailbox_close(box);
}

/* A flag change by another process renames the file after this handle
 * looked at the index; a foreign program renames it without the index. */
static void test_read_renamed(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    uint32_t uid = append(box, crlf_msg, 0, NULL);
    struct find_ctx before = find(box, uid);

    struct mailbox *other = NULL;
    struct mail_storage *s2 = other_storage(f, &other, "INBOX");
    struct petrel_error err;
    assert_true(mailbox_set_flags(other, uid, MAIL_FLAG_FLAGGED, NULL, &err));
    mailbox_close(other);
    mail_storage_free(s2);
    /* This handle's index still names the old file. */
    char *old_path = xasprintf("%s/alice/Maildir/cur/%s", f->dir, before.name);
    assert_int_not_equal(access(old_path, F_OK), 0);
    assert_message(box, uid, crlf_msg, MAILBOX_EOL_CRLF);

    /* A rename nobody told the index about (mutt marking it seen). */
    struct find_ctx now = find(box, uid);
    char *from = xasprintf("%s/alice/Maildir/cur/%s", f->dir, now.name);
    char *to = xasprintf("%sS", from);
    assert_int_equal(rename(from, to), 0);
    assert_message(box, uid, crlf_msg, MAILBOX_EOL_CRLF);
    free(old_path);
    free(from);
    free(to);
    mailbox_close(box);
}

/* ---------- flags ---------- */

static void test_update_flags(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    uint32_t u1 = append(box, crlf_msg, 0, NULL);
    uint32_t u2 = append(box, lf_msg, 0, NULL);
    uint32_t u3 = append(box, lf_msg, MAIL_FLAG_SEEN, NULL);
    struct petrel_error err;
    struct mailbox_info info;
    assert_true(mailbox_get_info(box, false, &info, &err));
    uint64_t modseq0 = info.highest_modseq;

    const char *kw[] = {"$Label1", "Work", NULL};
    struct mailbox_flags_update add = {
        .mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_SEEN | MAIL_FLAG_FLAGGED, .keywords = kw};
    uint32_t uids[] = {u2, u1, u2, 4242};
    struct mailbox_flags_result *res = NULL;
    size_t res_count = 0;
    uint32_t *failed = NULL;
    size_t failed_count = 0;
    assert_true(
        mailbox_update_flags(box, uids, 4, &add, &res, &res_count, &failed, &failed_count, &err));
    assert_int_equal(res_count, 2);
    assert_int_equal(failed_count, 0);
    assert_int_equal(res[0].uid, u1);
    assert_int_equal(res[1].uid, u2);
    assert_int_equal(res[0].flags, MAIL_FLAG_SEEN | MAIL_FLAG_FLAGGED);
    assert_true(res[0].modseq > modseq0);
    assert_true(res[1].modseq > res[0].modseq);
    assert_int_equal(res[0].keywords, 0x3);
    assert_string_equal(mailbox_keyword_name(box, 0), "$Label1");
    assert_string_equal(mailbox_keyword_name(box, 1), "Work");
    uint64_t u1_modseq = res[0].modseq;
    free(res);
    free(failed);
    struct find_ctx c = find(box, u1);
    assert_non_null(strstr(c.name, ":2,FSab"));
    assert_string_equal(c.keywords, "$Label1 Work ");

    /* -FLAGS never creates keywords; unknown names are ignored. */
    const char *rm_kw[] = {"work", "NoSuchKeyword", NULL};
    struct mailbox_flags_update rm = {
        .mode = MAILBOX_FLAGS_REMOVE, .flags = MAIL_FLAG_FLAGGED, .keywords = rm_kw};
    assert_true(mailbox_update_flags(box, &u1, 1, &rm, &res, &res_count, NULL, NULL, &err));
    assert_int_equal(res_count, 1);
    assert_int_equal(res[0].flags, MAIL_FLAG_SEEN);
    assert_int_equal(res[0].keywords, 0x1);
    assert_null(mailbox_keyword_name(box, 2));
    u1_modseq = res[0].modseq;
    free(res);

    /* UNCHANGEDSINCE: u1 is changed by another process after we read its
     * modseq; u3 is untouched since. */
    struct mailbox *other = NULL;
    struct mail_storage *s2 = other_storage(f, &other, "INBOX");
    assert_true(mailbox_set_flags(other, u1, MAIL_FLAG_ANSWERED, NULL, &err));
    mailbox_close(other);
    mail_storage_free(s2);
    struct mailbox_flags_update rep = {
        .mode = MAILBOX_FLAGS_REPLACE, .flags = MAIL_FLAG_DRAFT, .unchanged_since = u1_modseq};
    uint32_t both[] = {u1, u3};
    assert_true(
        mailbox_update_flags(box, both, 2, &rep, &res, &res_count, &failed, &failed_count, &err));
    assert_int_equal(failed_count, 1);
    assert_int_equal(failed[0], u1);
    assert_int_equal(res_count, 1);
    assert_int_equal(res[0].uid, u3);
    assert_int_equal(res[0].flags, MAIL_FLAG_DRAFT);
    free(res);
    free(failed);
    assert_int_equal(find(box, u1).flags, MAIL_FLAG_ANSWERED);

    /* No change: the modseq stays. */
    struct mailbox_flags_update same = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DRAFT};
    assert_true(mailbox_get_info(box, false, &info, &err));
    assert_true(mailbox_update_flags(box, &u3, 1, &same, &res, &res_count, NULL, NULL, &err));
    assert_int_equal(res_count, 1);
    assert_true(res[0].modseq <= info.highest_modseq);
    free(res);

    /* 26 keyword letters, then the folder is full. */
    for (int i = 0; i < 24; i++) {
        char name[16];
        snprintf(name, sizeof(name), "kw%02d", i);
        const char *one[] = {name, NULL};
        struct mailbox_flags_update k = {.mode = MAILBOX_FLAGS_ADD, .keywords = one};
        assert_true(mailbox_update_flags(box, &u2, 1, &k, NULL, NULL, NULL, NULL, &err));
    }
    const char *extra[] = {"OneTooMany", NULL};
    struct mailbox_flags_update k = {.mode = MAILBOX_FLAGS_ADD, .keywords = extra};
    assert_false(mailbox_update_flags(box, &u2, 1, &k, NULL, NULL, NULL, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_LIMIT);
    const char *bad[] = {"bad(name", NULL};
    k.keywords = bad;
    assert_false(mailbox_update_flags(box, &u2, 1, &k, NULL, NULL, NULL, NULL, &err));
    k.keywords = NULL;
    k.flags = 0x100;
    assert_false(mailbox_update_flags(box, &u2, 1, &k, NULL, NULL, NULL, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    mailbox_close(box);
}

/* ---------- copy and move ---------- */

static nlink_t link_count(struct fixture *f, const char *folder_dir, const char *name)
{
    char *path = xasprintf("%s/alice/Maildir/%scur/%s", f->dir, folder_dir, name);
    struct stat st;
    nlink_t n = stat(path, &st) == 0 ? st.st_nlink : 0;
    free(path);
    return n;
}

static void test_copy_move(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->user, f->ns, "Archive", &err));
    struct mailbox *inbox = open_box(f, "INBOX");
    struct mailbox *arch = open_box(f, "Archive");
    /* Archive's first keyword is another one: "Work" maps to a new letter. */
    const char *other_kw[] = {"Other", NULL};
    append(arch, crlf_msg, 0, other_kw);
    const char *kw[] = {"Work", NULL};
    uint32_t u1 = append(inbox, crlf_msg, MAIL_FLAG_SEEN, kw);
    uint32_t u2 = append(inbox, lf_msg, MAIL_FLAG_FLAGGED, NULL);
    uint32_t u3 = append(inbox, lf_msg, 0, NULL);

    uint32_t order[] = {u2, 777, u1};
    uint32_t *new_uids = NULL;
    assert_true(mailbox_copy(inbox, order, 3, arch, true, &new_uids, &err));
    assert_int_not_equal(new_uids[0], 0);
    assert_int_equal(new_uids[1], 0); /* no such message: skipped */
    assert_int_equal(new_uids[2], new_uids[0] + 1);
    struct find_ctx c = find(arch, new_uids[2]);
    assert_int_equal(c.flags, MAIL_FLAG_SEEN);
    assert_string_equal(c.keywords, "Work ");
    assert_non_null(strstr(c.name, ":2,Sb"));
    assert_int_equal(find(arch, new_uids[0]).flags, MAIL_FLAG_FLAGGED);
    assert_message(arch, new_uids[0], lf_msg, MAILBOX_EOL_LF);
    assert_message(arch, new_uids[2], crlf_msg, MAILBOX_EOL_CRLF);
    /* Same file system: the copy is a hard link. */
    assert_int_equal(link_count(f, ".Archive/", c.name), 2);
    free(new_uids);

    /* Without flags; into the same folder. */
    assert_true(mailbox_copy(inbox, &u1, 1, inbox, false, &new_uids, &err));
    c = find(inbox, new_uids[0]);
    assert_int_equal(c.flags, 0);
    assert_string_equal(c.keywords, "");
    free(new_uids);

    /* Move: in the destination, gone from the source. */
    struct mailbox_info before;
    assert_true(mailbox_get_info(arch, false, &before, &err));
    assert_true(mailbox_move(inbox, &u3, 1, arch, &new_uids, &err));
    assert_int_equal(new_uids[0], before.next_uid);
    assert_message(arch, new_uids[0], lf_msg, MAILBOX_EOL_LF);
    assert_null(mailbox_message_open(inbox, u3, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    free(new_uids);
    /* Nothing left in Archive's tmp/. */
    char *tmp = xasprintf("%s/alice/Maildir/.Archive/tmp", f->dir);
    DIR *d = opendir(tmp);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        assert_true(de->d_name[0] == '.');
    closedir(d);
    free(tmp);
    mailbox_close(inbox);
    mailbox_close(arch);
}

/* ---------- the session view ---------- */

static void run_child(struct fixture *f, void (*fn)(struct fixture *f, struct mailbox *box))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct mailbox *box = NULL;
        struct mail_storage *s = other_storage(f, &box, "INBOX");
        fn(f, box);
        mailbox_close(box);
        mail_storage_free(s);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void child_changes(struct fixture *f, struct mailbox *box)
{
    (void)f;
    struct petrel_error err;
    /* Expunge UIDs 2 and 4, flag 3, add two messages. */
    uint32_t gone[] = {2, 4};
    const struct mailbox_flags_update del = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DELETED};
    uint32_t *out = NULL;
    size_t out_count = 0;
    if (!mailbox_update_flags(box, gone, 2, &del, NULL, NULL, NULL, NULL, &err) ||
        !mailbox_expunge(box, gone, 2, &out, &out_count, &err) || out_count != 2)
        _exit(1);
    free(out);
    const char *kw[] = {"NewKeyword", NULL};
    if (!mailbox_set_flags(box, 3, MAIL_FLAG_SEEN, kw, &err))
        _exit(2);
    if (!mailbox_append(box, lf_msg, strlen(lf_msg), 0, NULL, 0, NULL, &err) ||
        !mailbox_append(box, lf_msg, strlen(lf_msg), MAIL_FLAG_SEEN, NULL, 0, NULL, &err))
        _exit(3);
}

static void test_view_sync(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    for (int i = 0; i < 5; i++)
        append(box, crlf_msg, i == 0 ? MAIL_FLAG_SEEN : 0, NULL);
    struct petrel_error err;
    struct mailbox_view *view = mailbox_view_new(box, &err);
    assert_non_null(view);
    struct mailbox_view_status st;
    mailbox_view_get_status(view, &st);
    assert_int_equal(st.messages, 5);
    assert_int_equal(st.unseen, 4);
    assert_int_equal(st.first_unseen_seq, 2);
    assert_int_equal(st.uid_next, 6);
    assert_true(st.keywords_creatable);
    uint32_t validity = st.uid_validity;
    uint64_t modseq = st.highest_modseq;

    /* Nothing happened: an empty difference. */
    struct mailbox_view_changes ch;
    assert_true(mailbox_view_sync(view, &ch, &err));
    assert_int_equal(ch.expunged_count, 0);
    assert_int_equal(ch.new_count, 0);
    assert_int_equal(ch.changed_count, 0);
    assert_int_equal(ch.exists, 5);
    mailbox_view_changes_free(&ch);

    run_child(f, child_changes);

    /* Before the sync the view is as it was: UID 2 is still sequence 2,
     * reading it fails for that message alone. */
    assert_int_equal(mailbox_view_count(view), 5);
    assert_int_equal(mailbox_view_at(view, 2)->uid, 2);
    assert_null(mailbox_message_open(box, 2, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_message(box, 5, crlf_msg, MAILBOX_EOL_CRLF);

    assert_true(mailbox_view_sync(view, &ch, &err));
    assert_false(ch.uidvalidity_changed);
    assert_int_equal(ch.expunged_count, 2);
    assert_int_equal(ch.expunged_seqs[0], 4); /* descending */
    assert_int_equal(ch.expunged_seqs[1], 2);
    assert_int_equal(ch.expunged_uids[0], 2);
    assert_int_equal(ch.expunged_uids[1], 4);
    assert_int_equal(ch.new_count, 2);
    assert_int_equal(ch.exists, 5);
    assert_int_equal(ch.changed_count, 1);
    assert_int_equal(ch.changed_seqs[0], 2); /* UID 3, now sequence 2 */
    assert_true(ch.keywords_changed);
    mailbox_view_changes_free(&ch);
    const uint32_t want[] = {1, 3, 5, 6, 7};
    for (uint32_t seq = 1; seq <= 5; seq++)
        assert_int_equal(mailbox_view_at(view, seq)->uid, want[seq - 1]);
    assert_null(mailbox_view_at(view, 6));
    assert_int_equal(mailbox_view_seq(view, 5), 3);
    assert_int_equal(mailbox_view_seq(view, 4), 0);
    const struct mailbox_view_entry *e = mailbox_view_at(view, 2);
    assert_int_equal(e->flags, MAIL_FLAG_SEEN);
    assert_int_equal(e->keywords, 0x1);
    assert_string_equal(mailbox_view_keyword_name(view, 0), "NewKeyword");
    mailbox_view_get_status(view, &st);
    assert_int_equal(st.uid_validity, validity);
    assert_int_equal(st.uid_next, 8);
    assert_true(st.highest_modseq > modseq);
    assert_int_equal(st.unseen, 2); /* UIDs 5 and 6 */
    assert_int_equal(st.first_unseen_seq, 3);

    /* The session's own STORE, noted at once, is not reported again; a
     * keyword it creates is. */
    const char *kw[] = {"Mine", NULL};
    struct mailbox_flags_update add = {
        .mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_FLAGGED, .keywords = kw};
    uint32_t uid5 = 5;
    struct mailbox_flags_result *res = NULL;
    size_t res_count = 0;
    assert_true(mailbox_update_flags(box, &uid5, 1, &add, &res, &res_count, NULL, NULL, &err));
    assert_true(mailbox_view_note_flags(view, res, res_count));
    assert_string_equal(mailbox_view_keyword_name(view, 1), "Mine");
    assert_int_equal(mailbox_view_at(view, 3)->modseq, res[0].modseq);
    free(res);
    assert_true(mailbox_view_sync(view, &ch, &err));
    assert_int_equal(ch.changed_count, 0);
    assert_int_equal(ch.expunged_count, 0);
    assert_int_equal(ch.new_count, 0);
    assert_false(ch.keywords_changed);
    mailbox_view_changes_free(&ch);

    /* A delivery by another program straight into new/ is seen too. */
    char *path = xasprintf("%s/alice/Maildir/new/1700000000.M1P1.otherhost", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(lf_msg, fp);
    fclose(fp);
    free(path);
    assert_true(mailbox_view_sync(view, &ch, &err));
    assert_int_equal(ch.new_count, 1);
    assert_int_equal(ch.exists, 6);
    assert_message(box, mailbox_view_at(view, 6)->uid, lf_msg, MAILBOX_EOL_LF);
    mailbox_view_changes_free(&ch);

    mailbox_view_free(view);
    mailbox_close(box);
}

/* ---------- change notification ---------- */

struct watch_ctx {
    struct event_base *base;
    int fired;
};

static void on_change(void *ctx)
{
    struct watch_ctx *w = ctx;
    w->fired++;
    event_base_loopbreak(w->base);
}

static void child_append(struct fixture *f, struct mailbox *box)
{
    (void)f;
    struct petrel_error err;
    if (!mailbox_append(box, lf_msg, strlen(lf_msg), 0, NULL, 0, NULL, &err))
        _exit(1);
}

/* Milliseconds from a change by a forked child to the callback. */
static long watch_latency(struct fixture *f, struct mailbox *box, bool native)
{
    struct watch_ctx ctx = {.base = event_base_new()};
    assert_non_null(ctx.base);
    struct petrel_error err;
    struct mailbox_watch_hub *hub = mailbox_watch_hub_new(ctx.base, native);
    struct mailbox_watch *w = mailbox_watch_new(hub, box, on_change, &ctx, &err);
    assert_non_null(w);
    assert_int_equal(mailbox_watch_is_native(w), native);
    struct timespec t0;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_child(f, child_append);
    struct timeval limit = {3, 0};
    event_base_loopexit(ctx.base, &limit);
    event_base_dispatch(ctx.base);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(ctx.fired, 1); /* one burst, one call */
    mailbox_watch_free(w);
    mailbox_watch_hub_free(hub);
    event_base_free(ctx.base);
    return (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
}

static void test_watch(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    append(box, crlf_msg, 0, NULL);
    long ms = watch_latency(f, box, true);
    assert_true(ms < 1000);

    ms = watch_latency(f, box, false);
    assert_true(ms < 2500);

    /* Caching FETCH data does not wake the session itself. */
    struct watch_ctx ctx = {.base = event_base_new()};
    struct petrel_error err;
    struct mailbox_watch_hub *hub = mailbox_watch_hub_new(ctx.base, true);
    struct mailbox_watch *w = mailbox_watch_new(hub, box, on_change, &ctx, &err);
    assert_non_null(w);
    /* A second watch on the same folder shares the directory watches;
     * freeing it must not blind the first. */
    struct watch_ctx other = {.base = ctx.base};
    struct mailbox_watch *w2 = mailbox_watch_new(hub, box, on_change, &other, &err);
    assert_non_null(w2);
    mailbox_watch_free(w2);
    assert_true(mailbox_cache_store(box, 1, "envelope", "x", 1, &err));
    struct timeval limit = {0, 300 * 1000};
    event_base_loopexit(ctx.base, &limit);
    event_base_dispatch(ctx.base);
    assert_int_equal(ctx.fired, 0);
    run_child(f, child_append);
    limit.tv_sec = 2;
    limit.tv_usec = 0;
    event_base_loopexit(ctx.base, &limit);
    event_base_dispatch(ctx.base);
    assert_int_equal(ctx.fired, 1); /* still watching after the other watch went */
    mailbox_watch_free(w);
    mailbox_watch_hub_free(hub);
    event_base_free(ctx.base);
    mailbox_close(box);
}

/* A selected folder's watch answers "changed?" for every command: it must
 * say yes at first, after another process's append (with no loop pass in
 * between: the queue is read on the question), after a folder the watch
 * sees is gone, and no otherwise. */
static void test_watch_take_changed(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    append(box, crlf_msg, 0, NULL);
    struct event_base *base = event_base_new();
    struct mailbox_watch_hub *hub = mailbox_watch_hub_new(base, true);
    struct mailbox_watch *w = mailbox_watch_new_native(hub, box, NULL, NULL);
    assert_non_null(w);
    assert_true(mailbox_watch_take_changed(w)); /* nothing known yet */
    assert_false(mailbox_watch_take_changed(w));
    struct petrel_error err;
    assert_true(mailbox_cache_store(box, 1, "envelope", "x", 1, &err));
    assert_false(mailbox_watch_take_changed(w)); /* the cache is not the folder */
    run_child(f, child_append);
    assert_true(mailbox_watch_take_changed(w));
    assert_false(mailbox_watch_take_changed(w));
    append(box, lf_msg, 0, NULL); /* our own change counts too */
    assert_true(mailbox_watch_take_changed(w));
    mailbox_watch_free(w);

    /* A watch on a folder that goes away keeps saying yes. */
    assert_true(mail_folder_create(f->user, f->ns, "Gone", &err));
    struct mailbox *gone = open_box(f, "Gone");
    w = mailbox_watch_new_native(hub, gone, NULL, NULL);
    assert_non_null(w);
    assert_true(mailbox_watch_take_changed(w));
    assert_false(mailbox_watch_take_changed(w));
    mailbox_close(gone);
    assert_true(mail_folder_delete(f->user, f->ns, "Gone", &err));
    assert_true(mailbox_watch_take_changed(w));
    assert_true(mailbox_watch_take_changed(w));
    mailbox_watch_free(w);

    /* Without inotify there is no native watch (and nothing to ask). */
    struct mailbox_watch_hub *polling = mailbox_watch_hub_new(base, false);
    assert_null(mailbox_watch_new_native(polling, box, NULL, NULL));
    mailbox_watch_hub_free(polling);
    mailbox_watch_hub_free(hub);
    event_base_free(base);
    mailbox_close(box);
}

/* A folder deleted and created again in the same second gets a greater
 * UIDVALIDITY (RFC 3501 2.3.1.1), or clients keep the old folder's cache. */
static void test_recreated_folder_gets_greater_uidvalidity(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    uint32_t last = 0;
    for (int i = 0; i < 5; i++) {
        assert_true(mail_folder_create(f->user, f->ns, "Again", &err));
        struct mailbox *box = open_box(f, "Again");
        struct mailbox_view *view = mailbox_view_new(box, &err);
        assert_non_null(view);
        struct mailbox_view_status st;
        mailbox_view_get_status(view, &st);
        assert_true(st.uid_validity > last);
        assert_true(st.uid_validity + 5 >= (uint32_t)time(NULL)); /* still about the time */
        last = st.uid_validity;
        mailbox_view_free(view);
        mailbox_close(box);
        assert_true(mail_folder_delete(f->user, f->ns, "Again", &err));
    }
}

/* Creating a folder builds its index through a handle of its own; a
 * descriptor that handle did not open (0 when zero-initialised) must never
 * be written: here descriptor 0 is a file that has to stay empty. */
static void test_create_leaves_descriptor_zero_alone(void **state)
{
    struct fixture *f = *state;
    char path[128];
    snprintf(path, sizeof(path), "%s/fd0", f->dir);
    int file = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(file >= 0);
    int saved = dup(0);
    assert_true(saved >= 0);
    assert_int_equal(dup2(file, 0), 0);
    struct petrel_error err;
    bool created = mail_folder_create(f->user, f->ns, "Fresh", &err);
    struct stat st;
    int r = fstat(0, &st);
    struct stat named;
    assert_int_equal(stat(path, &named), 0);
    assert_int_equal(dup2(saved, 0), 0);
    close(saved);
    close(file);
    assert_true(created);
    assert_int_equal(r, 0);
    assert_int_equal(st.st_ino, named.st_ino); /* still open as 0 */
    assert_int_equal(st.st_size, 0);
    struct mailbox *box = open_box(f, "Fresh");
    uint32_t uid = append(box, crlf_msg, 0, NULL);
    assert_message(box, uid, crlf_msg, MAILBOX_EOL_CRLF);
    mailbox_close(box);
}

/* A handle reaches its folder's files through the directory it opened: when
 * the folder is renamed and a new one takes the old name, what the handle
 * does lands in the renamed folder, never in the new one. */
static void test_renamed_folder_keeps_its_files(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(mail_folder_create(f->user, f->ns, "Work", &err));
    struct mailbox *box = open_box(f, "Work");
    uint32_t u1 = append(box, crlf_msg, 0, NULL);
    uint32_t u2 = append(box, lf_msg, 0, NULL);
    assert_true(mailbox_is(box, f->ns, "Work"));
    assert_true(mail_folder_rename(f->user, f->ns, "Work", "Done", &err));
    assert_true(mail_folder_create(f->user, f->ns, "Work", &err));
    /* the folder of that name is another one now */
    assert_false(mailbox_is(box, f->ns, "Work"));

    const char *kw[] = {"Later", NULL};
    const struct mailbox_flags_update seen = {
        .mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_SEEN, .keywords = kw};
    assert_true(mailbox_update_flags(box, &u1, 1, &seen, NULL, NULL, NULL, NULL, &err));
    uint32_t u3 = append(box, lf_msg, MAIL_FLAG_FLAGGED, NULL);
    expunge(box, u2);
    assert_message(box, u1, crlf_msg, MAILBOX_EOL_CRLF);
    mailbox_close(box);

    struct mailbox *done = open_box(f, "Done");
    struct mailbox_info info;
    assert_true(mailbox_get_info(done, false, &info, &err));
    assert_int_equal(info.messages, 2);
    struct find_ctx c = find(done, u1);
    assert_non_null(strstr(c.name, ":2,Sa"));
    assert_string_equal(c.keywords, "Later ");
    c = find(done, u3);
    assert_non_null(strstr(c.name, ":2,F"));
    assert_message(done, u3, lf_msg, MAILBOX_EOL_LF);
    mailbox_close(done);

    struct mailbox *fresh = open_box(f, "Work");
    assert_true(mailbox_get_info(fresh, false, &info, &err));
    assert_int_equal(info.messages, 0);
    mailbox_close(fresh);
    char kwpath[192];
    snprintf(kwpath, sizeof(kwpath), "%s/alice/Maildir/.Work/dovecot-keywords", f->dir);
    struct stat st;
    assert_true(stat(kwpath, &st) != 0 || st.st_size == 0);
}

/* ---------- cache ---------- */

static void test_cache(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    uint32_t u1 = append(box, crlf_msg, 0, NULL);
    uint32_t u2 = append(box, lf_msg, 0, NULL);
    struct petrel_error err;
    static const char env[] = "(\"date\" \"subject\" NIL)";
    assert_true(mailbox_cache_store(box, u1, "envelope", env, sizeof(env) - 1, &err));
    assert_true(mailbox_cache_store(box, u2, "bodystructure", "BS", 2, &err));
    size_t len = 0;
    const char *v = mailbox_cache_lookup(box, u1, "envelope", &len);
    assert_non_null(v);
    assert_int_equal(len, sizeof(env) - 1);
    assert_memory_equal(v, env, len);
    assert_null(mailbox_cache_lookup(box, u1, "bodystructure", &len));
    assert_null(mailbox_cache_lookup(box, 99, "envelope", &len));
    assert_false(mailbox_cache_store(box, 99, "envelope", "x", 1, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_false(mailbox_cache_store(box, u1, "bad field", "x", 1, &err));

    /* Another handle reads what this one stored. */
    struct mailbox *other = NULL;
    struct mail_storage *s2 = other_storage(f, &other, "INBOX");
    v = mailbox_cache_lookup(other, u2, "bodystructure", &len);
    assert_non_null(v);
    assert_memory_equal(v, "BS", 2);
    mailbox_close(other);
    mail_storage_free(s2);

    /* A rebuild keeps the UIDs, so the values still answer. */
    struct mailbox_rebuild_stats stats;
    assert_true(mailbox_index_rebuild(box, &stats, &err));
    assert_non_null(mailbox_cache_lookup(box, u1, "envelope", &len));

    /* A value stored under a UID for another file (what a foreign uidlist
     * handing out an old UID would leave) does not answer. */
    char *inbox_dir = xasprintf("%s/alice/Maildir", f->dir);
    struct fileindex_settings set = {.fsync = FILEINDEX_FSYNC_NEVER};
    struct fileindex *raw = fileindex_open(inbox_dir, &set, &err);
    assert_non_null(raw);
    assert_true(fileindex_cache_add(raw, u2, "hdr", "12345678stale", 13, &err));
    fileindex_close(raw);
    free(inbox_dir);
    assert_null(mailbox_cache_lookup(box, u2, "hdr", &len));

    /* Expunged: gone. */
    expunge(box, u1);
    assert_null(mailbox_cache_lookup(box, u1, "envelope", &len));
    assert_non_null(mailbox_cache_lookup(box, u2, "bodystructure", &len));

    /* A new index (damaged one replaced) never answers with old values. */
    mailbox_close(box);
    char *index = xasprintf("%s/alice/Maildir/petrel.index", f->dir);
    FILE *fp = fopen(index, "w");
    assert_non_null(fp);
    fputs("garbage", fp);
    fclose(fp);
    free(index);
    box = open_box(f, "INBOX");
    assert_null(mailbox_cache_lookup(box, u2, "bodystructure", &len));
    mailbox_close(box);
}

/* A referenced user survives the cache eviction that thousands of other
 * users cause (an IMAP session holds its user for hours). */
static void test_user_ref_survives_eviction(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct mail_user *held = mail_user_get(f->storage, "holder", &err);
    assert_non_null(held);
    mail_user_ref(held);
    for (int i = 0; i < 10000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "u%d", i);
        assert_non_null(mail_user_get(f->storage, name, &err));
    }
    assert_string_equal(mail_user_name(held), "holder");
    assert_ptr_equal(mail_user_get(f->storage, "holder", &err), held);
    mail_user_unref(held);
}

/* ---------- appending from a file (spooled uploads) ---------- */

static int spool_with(const char *dir, const char *text)
{
    struct petrel_error err;
    bool linkable;
    int fd = fs_tmpfile_open(dir, &linkable, &err);
    if (fd < 0)
        return -1;
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    return fd;
}

static ino_t stored_inode(struct fixture *f, struct mailbox *box, uint32_t uid)
{
    struct find_ctx c = find(box, uid);
    char *path = xasprintf("%s/alice/Maildir/cur/%s", f->dir, c.name);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    free(path);
    return st.st_ino;
}

static void test_append_file(void **state)
{
    struct fixture *f = *state;
    struct mailbox *box = open_box(f, "INBOX");
    struct petrel_error err;
    /* The user's spool is an unnamed file in INBOX's tmp/: it becomes the
     * message by a link (same inode), bare LFs and all. */
    int fd = mail_user_spool_open(f->user, &err);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, lf_msg, strlen(lf_msg)), (ssize_t)strlen(lf_msg));
    uint32_t uid1 = 0;
    assert_true(mailbox_append_file(box, NULL, 0, fd, 0, strlen(lf_msg), 0, NULL, 0, &uid1, &err));
    assert_message(box, uid1, lf_msg, MAILBOX_EOL_LF);
    uint64_t size = 0, vsize = 0;
    assert_true(mailbox_message_sizes(box, uid1, &size, &vsize, &err));
    assert_int_equal(size, strlen(lf_msg));
    assert_int_equal(vsize, strlen(lf_msg) + 5); /* five bare LFs */
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_nlink, 1);
    assert_int_equal(stored_inode(f, box, uid1), st.st_ino);
    /* Linked once, the file is a message: a second save copies it. */
    uint32_t uid2 = 0;
    assert_true(mailbox_append_file(box, NULL, 0, fd, 0, strlen(lf_msg), MAIL_FLAG_SEEN, NULL, 0,
                                    &uid2, &err));
    assert_message(box, uid2, lf_msg, MAILBOX_EOL_LF);
    assert_true(stored_inode(f, box, uid2) != st.st_ino);
    /* A prefix and a range of the file: copied, prefix first. */
    static const char prefix[] = "X-Trace: one\r\n";
    uint32_t uid3 = 0;
    assert_true(mailbox_append_file(box, prefix, strlen(prefix), fd, 33, strlen(lf_msg) - 33, 0,
                                    NULL, 0, &uid3, &err));
    char *want = xasprintf("%s%s", prefix, lf_msg + 33);
    assert_message(box, uid3, want, MAILBOX_EOL_MIXED);
    free(want);
    /* A file shorter than promised: refused, nothing added. */
    uint32_t uid4 = 0;
    assert_false(
        mailbox_append_file(box, NULL, 0, fd, 0, strlen(lf_msg) + 1, 0, NULL, 0, &uid4, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    close(fd);
    /* A spool on another file system (tmpfs) cannot be linked: copied. */
    struct stat shm, home;
    fd = stat("/dev/shm", &shm) == 0 && stat(f->dir, &home) == 0 && shm.st_dev != home.st_dev
             ? spool_with("/dev/shm", crlf_msg)
             : -1;
    if (fd >= 0) {
        uint32_t uid5 = 0;
        assert_true(
            mailbox_append_file(box, NULL, 0, fd, 0, strlen(crlf_msg), 0, NULL, 0, &uid5, &err));
        assert_message(box, uid5, crlf_msg, MAILBOX_EOL_CRLF);
        close(fd);
    }
    struct mailbox_info info;
    assert_true(mailbox_get_info(box, false, &info, &err));
    assert_int_equal(info.messages, fd >= 0 ? 4 : 3);
    /* Nothing named was left in tmp/. */
    char *tmp = xasprintf("%s/alice/Maildir/tmp", f->dir);
    DIR *d = opendir(tmp);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        assert_true(de->d_name[0] == '.');
    closedir(d);
    free(tmp);
    mailbox_close(box);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_renamed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_update_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_copy_move, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch_take_changed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recreated_folder_gets_greater_uidvalidity, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_create_leaves_descriptor_zero_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_renamed_folder_keeps_its_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_user_ref_survives_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_file, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
