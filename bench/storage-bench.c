/* Whole-store benchmark: a Maildir++ folder of N messages (default 100,000)
 * through the storage API of mail-storage.h (maildir driver + fileindex +
 * dovecot-uidlist), the way petreld uses it.
 *
 *   storage-bench populate --dir DIR [--count N]
 *       writes N message files straight into DIR/home/u1/Maildir/.Bench/cur
 *       (Dovecot-style names with S= and W=, 1/4 unseen), no index.
 *   storage-bench run --dir DIR [--fsync always|optimized|never]
 *       prints one table: first open (index built from the files), index
 *       rebuild, open + folder info on the fresh index (best/median of 9),
 *       open + reading every record, a sync picking up 10 % flag changes
 *       made by another program, expunging those 10 %, open afterwards.
 *   storage-bench mem --dir DIR
 *       a fresh process opening the folder once: RSS growth (anonymous and
 *       file-backed) per message.
 *
 * Timings are wall and CPU time of this process; sync(2) runs before each
 * timed step so writeback left by the previous one is not counted. */
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/mail-storage.h"
#include "storage/maildir/maildir-filename.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define FOLDER "Bench"

struct span {
    double wall;
    double cpu;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct span span_start(void)
{
    struct span s = {now(), cpu_now()};
    return s;
}

static struct span span_end(struct span s)
{
    struct span d = {now() - s.wall, cpu_now() - s.cpu};
    return d;
}

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtol(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

static void die(const char *what, const struct petrel_error *err)
{
    fprintf(stderr, "storage-bench: %s: %s\n", what, err != NULL ? err->message : strerror(errno));
    exit(1);
}

static void row(const char *name, struct span d, const char *note)
{
    printf("| %-46s | %10.1f ms | %10.1f ms | %s\n", name, d.wall * 1e3, d.cpu * 1e3,
           note != NULL ? note : "");
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---------- the storage ---------- */

static struct namespace_config ns = {
    .name = "inbox",
    .type = NAMESPACE_PERSONAL,
    .prefix = "",
    .separator = '/',
    .location = "maildir:%h/Maildir",
    .subscriptions = true,
    .slug = "personal",
};

static struct mail_storage *storage_open(const char *dir, int fsync_policy,
                                         struct mail_user **user)
{
    static struct mail_config cfg;
    cfg.home = xasprintf("%s/home/%%u", dir);
    cfg.fsync = fsync_policy;
    cfg.namespaces = &ns;
    cfg.namespace_count = 1;
    struct mail_storage *st = mail_storage_new(&cfg, NULL);
    struct petrel_error err;
    *user = mail_user_get(st, "u1", &err);
    if (*user == NULL)
        die("user", &err);
    return st;
}

static char *folder_path(const char *dir)
{
    return xasprintf("%s/home/u1/Maildir/." FOLDER, dir);
}

/* ---------- populate ---------- */

static void mkdir_or_die(const char *path)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        die(path, NULL);
}

static int populate(const char *dir, size_t count)
{
    char *p;
    const char *parts[] = {"home", "home/u1", "home/u1/Maildir", "home/u1/Maildir/." FOLDER,
                           "home/u1/Maildir/." FOLDER "/cur", "home/u1/Maildir/." FOLDER "/new",
                           "home/u1/Maildir/." FOLDER "/tmp"};
    mkdir_or_die(dir);
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        p = xasprintf("%s/%s", dir, parts[i]);
        mkdir_or_die(p);
        free(p);
    }
    p = xasprintf("%s/home/u1/Maildir/." FOLDER "/maildirfolder", dir);
    int mf = open(p, O_WRONLY | O_CREAT, 0600);
    if (mf >= 0)
        close(mf);
    free(p);
    char *cur = xasprintf("%s/cur", folder_path(dir));
    char body[8192];
    struct span t0 = span_start();
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        /* 400..4400 bytes, LF line endings (vsize counts CRLF). */
        size_t want = 400 + (i * 7919) % 4000;
        int n = snprintf(body, sizeof(body),
                         "From: sender%zu@example.net\nTo: u1@example.org\n"
                         "Subject: benchmark message %zu\nMessage-ID: <%zu@bench>\n"
                         "Date: Tue, 14 Nov 2023 22:13:20 +0000\n\n",
                         i % 977, i, i);
        size_t len = (size_t)n;
        size_t lines = 6;
        while (len < want) {
            size_t l = 72 < want - len ? 72 : want - len;
            memset(body + len, 'a' + (char)(i % 26), l - 1);
            body[len + l - 1] = '\n';
            len += l;
            lines++;
        }
        const char *flags = i % 4 == 0 ? "" : i % 10 == 1 ? "FS" : "S";
        char name[256];
        snprintf(name, sizeof(name), "%s/%llu.M%zuP%zu.bench.example.net,S=%zu,W=%zu:2,%s", cur,
                 (unsigned long long)(1700000000 + i), i % 1000000, 1000 + i / 1000, len,
                 len + lines, flags);
        int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || write(fd, body, len) != (ssize_t)len || close(fd) != 0)
            die(name, NULL);
        struct timespec ts[2] = {{(time_t)(1700000000 + i), 0}, {(time_t)(1700000000 + i), 0}};
        utimensat(AT_FDCWD, name, ts, 0);
        total += len;
    }
    struct span d = span_end(t0);
    printf("populated %zu messages (%.1f MB) in %s in %.1f s\n", count, (double)total / 1e6, cur,
           d.wall);
    free(cur);
    /* The same number of plain files elsewhere: what the file system alone
     * takes to unlink a tenth of them (the floor under "expunge 10%"). */
    char *plain = xasprintf("%s/baseline", dir);
    mkdir_or_die(plain);
    memset(body, 'x', 2400);
    for (size_t i = 0; i < count; i++) {
        char name[256];
        snprintf(name, sizeof(name), "%s/f%08zu", plain, i);
        int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || write(fd, body, 2400) != 2400 || close(fd) != 0)
            die(name, NULL);
    }
    free(plain);
    return 0;
}

static void baseline_unlink(const char *dir, size_t *unlinked, struct span *d)
{
    char *plain = xasprintf("%s/baseline", dir);
    *unlinked = 0;
    sync();
    struct span t0 = span_start();
    for (size_t i = 0;; i += 10) {
        char name[256];
        snprintf(name, sizeof(name), "%s/f%08zu", plain, i);
        if (unlink(name) != 0)
            break;
        ++*unlinked;
    }
    int fd = open(plain, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    *d = span_end(t0);
    free(plain);
}

/* ---------- run ---------- */

static struct mailbox *open_box(struct mail_user *user)
{
    struct petrel_error err;
    struct mailbox *box = mailbox_open(user, &ns, FOLDER, &err);
    if (box == NULL)
        die("open", &err);
    return box;
}

static void count_record(const struct mailbox_message *msg, void *ctx)
{
    *(uint64_t *)ctx += msg->size;
}

static void count_deleted(const struct mailbox_message *msg, void *ctx)
{
    if ((msg->flags & MAIL_FLAG_DELETED) != 0)
        ++*(uint64_t *)ctx;
}

/* Renames every tenth file in cur/ to carry \Deleted (T), as another
 * program (Dovecot, mutt) would. */
static size_t mark_tenth_deleted(const char *dir)
{
    char *cur = xasprintf("%s/cur", folder_path(dir));
    DIR *d = opendir(cur);
    if (d == NULL)
        die(cur, NULL);
    char **names = NULL;
    size_t n = 0;
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        names = xgrow(names, &cap, n + 1, sizeof(*names));
        names[n++] = xstrdup(de->d_name);
    }
    closedir(d);
    size_t marked = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 10 == 0) {
            struct maildir_filename fn;
            if (maildir_filename_parse(names[i], &fn)) {
                struct buf to = {0};
                maildir_filename_build(fn.base, fn.base_len, fn.flags | MAIL_FLAG_DELETED,
                                       fn.keywords, fn.unknown_flags, &to);
                char *a = xasprintf("%s/%s", cur, names[i]);
                char *b = xasprintf("%s/%s", cur, to.data);
                if (rename(a, b) == 0)
                    marked++;
                free(a);
                free(b);
                buf_free(&to);
            }
        }
        free(names[i]);
    }
    free(names);
    free(cur);
    return marked;
}

static void timed_opens(struct mail_user *user, const char *label, int rounds)
{
    double *wall = xcalloc((size_t)rounds, sizeof(double));
    double *cpu = xcalloc((size_t)rounds, sizeof(double));
    uint32_t messages = 0;
    sync();
    for (int i = 0; i < rounds; i++) {
        struct span t0 = span_start();
        struct mailbox *box = open_box(user);
        struct mailbox_info info;
        struct petrel_error err;
        if (!mailbox_get_info(box, false, &info, &err))
            die("info", &err);
        struct span d = span_end(t0);
        messages = info.messages;
        mailbox_close(box);
        wall[i] = d.wall;
        cpu[i] = d.cpu;
    }
    qsort(wall, (size_t)rounds, sizeof(double), cmp_double);
    qsort(cpu, (size_t)rounds, sizeof(double), cmp_double);
    char note[128];
    snprintf(note, sizeof(note), "best of %d: %.1f ms; %u messages; target < 50 ms", rounds,
             wall[0] * 1e3, messages);
    struct span median = {wall[rounds / 2], cpu[rounds / 2]};
    row(label, median, note);
    free(wall);
    free(cpu);
}

static struct log_levels quiet = {.base = LOG_WARN};

static int run(const char *dir, int fsync_policy, const char *fsync_name)
{
    log_install(&quiet);
    struct mail_user *user;
    struct mail_storage *st = storage_open(dir, fsync_policy, &user);
    char *fdir = folder_path(dir);
    static const char *const index_files[] = {"petrel.index",       "petrel.index.log",
                                              "petrel.index.cache", "dovecot-uidlist",
                                              "petrel-maildir-sync"};
    for (size_t i = 0; i < sizeof(index_files) / sizeof(index_files[0]); i++) {
        char *p = xasprintf("%s/%s", fdir, index_files[i]);
        unlink(p);
        free(p);
    }
    struct utsname uts;
    uname(&uts);
    printf("storage-bench: folder %s, fsync=%s, %s %s\n\n", fdir, fsync_name, uts.sysname,
           uts.release);
    printf("| %-46s | %13s | %13s | %s\n", "operation", "wall", "cpu", "notes");
    printf("|%s|%s|%s|%s\n", "------------------------------------------------",
           "---------------", "---------------", "------");
    struct petrel_error err;
    char note[160];

    /* 1. No index yet: open scans the files and builds it. */
    sync();
    struct span t0 = span_start();
    struct mailbox *box = open_box(user);
    struct span d = span_end(t0);
    struct mailbox_info info;
    if (!mailbox_get_info(box, false, &info, &err))
        die("info", &err);
    snprintf(note, sizeof(note), "%u messages indexed from the files", info.messages);
    row("first open (no index: built from files)", d, note);

    /* 2. Rebuild. */
    struct mailbox_rebuild_stats rs;
    sync(); /* leftover writeback from the step before is not this step's cost */
    t0 = span_start();
    if (!mailbox_index_rebuild(box, &rs, &err))
        die("rebuild", &err);
    d = span_end(t0);
    snprintf(note, sizeof(note), "scanned %llu, preserved %llu, assigned %llu; target < 3 s",
             (unsigned long long)rs.scanned, (unsigned long long)rs.uids_preserved,
             (unsigned long long)rs.uids_assigned);
    row("index rebuild", d, note);
    mailbox_close(box);

    /* 3. Open + folder info on the fresh index (what folder/info does). */
    timed_opens(user, "open + folder info (fresh index, median)", 9);

    /* 4. Open + every record (a full first read; the sync check included). */
    sync(); /* leftover writeback from the step before is not this step's cost */
    t0 = span_start();
    box = open_box(user);
    uint64_t sum = 0;
    bool truncated;
    if (!mailbox_foreach(box, 0, count_record, &sum, &truncated, &err))
        die("foreach", &err);
    d = span_end(t0);
    snprintf(note, sizeof(note), "%.1f MB in records", (double)sum / 1e6);
    row("open + read every record", d, note);
    mailbox_close(box);

    /* 5. Another program flags 10 % \Deleted; the next open syncs. */
    size_t marked = mark_tenth_deleted(dir);
    sync(); /* leftover writeback from the step before is not this step's cost */
    t0 = span_start();
    box = open_box(user);
    if (!mailbox_get_info(box, false, &info, &err)) /* the first operation syncs */
        die("info", &err);
    d = span_end(t0);
    uint64_t deleted = 0;
    if (!mailbox_foreach(box, 0, count_deleted, &deleted, &truncated, &err))
        die("foreach", &err);
    snprintf(note, sizeof(note), "%zu files renamed, %llu \\Deleted in the index", marked,
             (unsigned long long)deleted);
    row("open + sync of 10% flag changes", d, note);

    /* File system floor: unlinking as many plain files from a directory as
     * large. */
    size_t unlinked = 0;
    baseline_unlink(dir, &unlinked, &d);
    if (unlinked > 0) {
        snprintf(note, sizeof(note), "%zu plain files of %s/baseline: the file system alone",
                 unlinked, dir);
        row("baseline: unlink 10% of plain files", d, note);
    }

    /* 6. Expunge them. */
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    sync(); /* leftover writeback from the step before is not this step's cost */
    t0 = span_start();
    if (!mailbox_expunge(box, NULL, 0, &gone, &gone_count, &err))
        die("expunge", &err);
    d = span_end(t0);
    snprintf(note, sizeof(note), "%zu messages expunged (files, index, uidlist)", gone_count);
    row("expunge 10%", d, note);
    free(gone);
    mailbox_close(box);

    /* 7. Opens afterwards (log holds the expunges, or was folded). */
    timed_opens(user, "open + folder info after expunge (median)", 9);
    mailbox_index_optimize(box = open_box(user), &err);
    mailbox_close(box);
    timed_opens(user, "open + folder info after optimize (median)", 9);

    free(fdir);
    mail_storage_free(st);
    return 0;
}

/* ---------- mem ---------- */

static int mem(const char *dir)
{
    log_install(&quiet);
    struct mail_user *user;
    struct mail_storage *st = storage_open(dir, 0, &user);
    long rss0 = status_kb("VmRSS");
    long anon0 = status_kb("RssAnon");
    long file0 = status_kb("RssFile");
    struct mailbox *box = open_box(user);
    struct mailbox_info info;
    struct petrel_error err;
    if (!mailbox_get_info(box, false, &info, &err))
        die("info", &err);
    long rss1 = status_kb("VmRSS");
    long anon1 = status_kb("RssAnon");
    long file1 = status_kb("RssFile");
    double n = info.messages > 0 ? info.messages : 1;
    printf("memory of one open folder (%u messages, fresh process): RSS +%ld KiB = %.1f B/msg "
           "(anonymous +%ld KiB = %.1f B/msg, file-backed +%ld KiB = %.1f B/msg); "
           "target < 64 B/msg\n",
           info.messages, rss1 - rss0, (double)(rss1 - rss0) * 1024 / n, anon1 - anon0,
           (double)(anon1 - anon0) * 1024 / n, file1 - file0, (double)(file1 - file0) * 1024 / n);
    mailbox_close(box);
    mail_storage_free(st);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
    usage:
        fprintf(stderr,
                "usage: %s populate|run|mem --dir DIR [--count N] "
                "[--fsync always|optimized|never]\n",
                argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    const char *dir = NULL;
    size_t count = 100000;
    const char *fsync_name = "always";
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = (size_t)strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--fsync") == 0 && i + 1 < argc)
            fsync_name = argv[++i];
        else
            goto usage;
    }
    if (dir == NULL)
        goto usage;
    int policy = strcmp(fsync_name, "never") == 0 ? 2 : strcmp(fsync_name, "optimized") == 0 ? 1 : 0;
    if (strcmp(mode, "populate") == 0)
        return populate(dir, count);
    if (strcmp(mode, "run") == 0)
        return run(dir, policy, fsync_name);
    if (strcmp(mode, "mem") == 0)
        return mem(dir);
    goto usage;
}
