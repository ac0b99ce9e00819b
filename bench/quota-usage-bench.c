/* Quota usage benchmark (docs/performance.md, "Quota usage"): the cost of
 * a user's usage as a sum of folder aggregates (storage/quota/quota-usage.h),
 * which document 3's quota/show needs for 100 folders x 10,000 messages in
 * under 10 ms.
 *
 *   quota-usage-bench [--folders 100] [--messages 10000] [--runs 50] [--dir DIR] [--fold 1]
 *
 * Builds a Maildir++ user under DIR (default a fresh directory in /tmp):
 * `folders` folders (INBOX and .F1 ... subfolders), each with an index of
 * `messages` records written in one transaction (as deliveries would leave
 * them; the message files themselves are not needed to read usage) and,
 * with --fold 1, folded into the base (as a log past 1 MiB is; without it
 * each log holds its 10,000 appends, close to the fold size: the worst
 * case for a reader that does not load records), then
 * times quota_usage_get() `runs` times (best and median, wall and CPU), and
 * for comparison one open of every folder's index with a sum over its
 * records (what a scan of the messages' sizes would cost at the least). */
#include "core/buf.h"
#include "core/xalloc.h"
#include "server/config.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage.h"
#include "storage/quota/quota-usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void mkdirs(const char *path)
{
    char *p = xstrdup(path);
    for (char *s = p + 1; *s != '\0'; s++) {
        if (*s == '/') {
            *s = '\0';
            mkdir(p, 0700);
            *s = '/';
        }
    }
    mkdir(p, 0700);
    free(p);
}

int main(int argc, char **argv)
{
    int folders = 100, messages = 10000, runs = 50, fold = 0;
    const char *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--folders") == 0)
            folders = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--messages") == 0)
            messages = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--fold") == 0)
            fold = atoi(argv[i + 1]);
    }
    char tmp[] = "/tmp/petrel-quota-usage-XXXXXX";
    if (dir == NULL && (dir = mkdtemp(tmp)) == NULL)
        return 1;
    char *yaml = xasprintf("mail:\n  home: %s/%%u\n  fsync: never\n", dir);
    struct petrel_error err = {0};
    struct petrel_config *cfg = config_parse("bench", yaml, strlen(yaml), &err);
    if (cfg == NULL) {
        fprintf(stderr, "config: %s\n", err.message);
        return 1;
    }
    struct mail_storage *storage = mail_storage_new(&cfg->mail, NULL);
    struct mail_user *user = mail_user_get(storage, "bench", &err);
    const struct namespace_config *ns = user ? mail_user_namespace(user, "personal", &err) : NULL;
    struct buf root = {0};
    if (ns == NULL || !mail_user_namespace_root(user, ns, &root, &err)) {
        fprintf(stderr, "user: %s\n", err.message);
        return 1;
    }
    struct fileindex_settings set = {.fsync = FILEINDEX_FSYNC_NEVER};
    double t0 = now(CLOCK_MONOTONIC);
    for (int f = 0; f < folders; f++) {
        char *fdir = f == 0 ? xstrdup(buf_cstr(&root)) : xasprintf("%s/.F%d", buf_cstr(&root), f);
        for (const char *sub = "cur"; sub != NULL; sub = strcmp(sub, "cur") == 0   ? "new"
                                                         : strcmp(sub, "new") == 0 ? "tmp"
                                                                                   : NULL) {
            char *d = xasprintf("%s/%s", fdir, sub);
            mkdirs(d);
            free(d);
        }
        if (f > 0) {
            char *mf = xasprintf("%s/maildirfolder", fdir);
            fclose(fopen(mf, "w"));
            free(mf);
        }
        uint8_t guid[16] = {(uint8_t)f, 1, 2, 3};
        struct fileindex *fi = NULL;
        if (!fileindex_create(fdir, guid, 1000 + (uint32_t)f, &set, &err) ||
            (fi = fileindex_open(fdir, &set, &err)) == NULL) {
            fprintf(stderr, "index %s: %s\n", fdir, err.message);
            return 1;
        }
        struct fileindex_txn *t = fileindex_begin(fi, &err);
        for (int m = 0; m < messages; m++) {
            char name[96];
            snprintf(name, sizeof(name), "1700000000.M%dP%d.bench,S=%d,W=%d", m, f, 1000 + m % 5000,
                     1020 + m % 5000);
            struct fileindex_record rec = {.size = 1000 + (uint64_t)(m % 5000),
                                           .vsize = 1020 + (uint64_t)(m % 5000),
                                           .filename = name};
            fileindex_txn_append(t, &rec);
        }
        if (!fileindex_txn_commit(t, &err) || (fold && !fileindex_optimize(fi, &err))) {
            fprintf(stderr, "commit: %s\n", err.message);
            return 1;
        }
        fileindex_close(fi);
        free(fdir);
    }
    printf("built %d folders x %d messages (%s) in %.1f s under %s\n", folders, messages,
           fold ? "logs folded into the bases" : "each log holding its appends",
           now(CLOCK_MONOTONIC) - t0, dir);

    struct quota_rules rules;
    quota_rules_init(&rules);
    double *wall = xcalloc((size_t)runs, sizeof(double));
    double *cpu = xcalloc((size_t)runs, sizeof(double));
    struct quota_usage u = {0, 0};
    for (int r = 0; r < runs; r++) {
        double w = now(CLOCK_MONOTONIC), c = now(CLOCK_PROCESS_CPUTIME_ID);
        if (!quota_usage_get(user, &rules, NULL, &u, &err)) {
            fprintf(stderr, "usage: %s\n", err.message);
            return 1;
        }
        wall[r] = now(CLOCK_MONOTONIC) - w;
        cpu[r] = now(CLOCK_PROCESS_CPUTIME_ID) - c;
    }
    qsort(wall, (size_t)runs, sizeof(double), cmp_double);
    qsort(cpu, (size_t)runs, sizeof(double), cmp_double);
    printf("quota_usage_get: %llu messages, %llu bytes; best %.2f ms, median %.2f ms wall "
           "(CPU best %.2f ms, median %.2f ms) over %d runs\n",
           (unsigned long long)u.messages, (unsigned long long)u.storage, wall[0] * 1e3,
           wall[runs / 2] * 1e3, cpu[0] * 1e3, cpu[runs / 2] * 1e3, runs);

    /* For comparison: every index opened and its records summed. */
    double w = now(CLOCK_MONOTONIC), c = now(CLOCK_PROCESS_CPUTIME_ID);
    uint64_t bytes = 0;
    for (int f = 0; f < folders; f++) {
        char *fdir = f == 0 ? xstrdup(buf_cstr(&root)) : xasprintf("%s/.F%d", buf_cstr(&root), f);
        struct fileindex *fi = fileindex_open(fdir, &set, &err);
        for (size_t i = 0; fi != NULL && i < fileindex_count(fi); i++)
            bytes += fileindex_record_at(fi, i)->size;
        fileindex_close(fi);
        free(fdir);
    }
    printf("open every index and sum its records: %.2f ms wall, %.2f ms CPU (bytes %s)\n",
           (now(CLOCK_MONOTONIC) - w) * 1e3, (now(CLOCK_PROCESS_CPUTIME_ID) - c) * 1e3,
           bytes == u.storage ? "agree" : "DIFFER");
    free(wall);
    free(cpu);
    quota_rules_free(&rules);
    buf_free(&root);
    mail_storage_free(storage);
    config_free(cfg);
    free(yaml);
    if (argc < 2 || dir == tmp) {
        char *cmd = xasprintf("rm -rf '%s'", tmp);
        if (system(cmd) != 0) {
        }
        free(cmd);
    }
    return bytes == u.storage ? 0 : 1;
}
