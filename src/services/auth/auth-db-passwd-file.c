/* The `passwd-file` passdb/userdb driver: the whole file parsed into memory
 * (passwd-file.c) at open, and again when it changes.
 *
 * - Open fails when the file cannot be read; malformed lines are logged as
 *   warnings (`file:line: message`, at most PF_MAX_LOGGED_PROBLEMS per
 *   load, then a count) and skipped.
 * - A lookup checks at most once a second whether the file's inode, size or
 *   mtime changed, and reloads it then. Only one thread checks at a time
 *   (the others go on with the table they have); the new table is built
 *   without any lock held and swapped in under the write lock, so lookups
 *   wait only for the pointer swap. Lookups copy what they return under the
 *   read lock.
 * - Operators should replace the file by writing a new one and renaming
 *   it over the old: a reload that reads a file being rewritten in place
 *   may see it half written. A size or mtime change during the read is
 *   caught (the copy is refused); a rewrite that has truncated the file but
 *   not yet written it is not.
 * - A reload that fails (unreadable file, vanished file) keeps the old
 *   table and logs an error; the next check a second later tries again, and
 *   the same error is not logged twice in a row. The identity compared is
 *   the one fstat() gave for the bytes actually read, so a file replaced
 *   while it was read is loaded again at the next check. */
#include "services/auth/auth-db-private.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "services/auth/passwd-file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COMPONENT "auth"
#define PF_CHECK_INTERVAL_MS 1000
#define PF_MAX_FILE_BYTES ((size_t)1 << 30)
#define PF_MAX_LOGGED_PROBLEMS 100

/* What tells one version of the file from another. */
struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct pf_db {
    struct auth_db head;
    char *path;

    pthread_rwlock_t table_lock;
    struct passwd_file *table; /* guarded by table_lock */

    pthread_mutex_t check_lock; /* one checker at a time; guards the fields below */
    struct file_id id;          /* of the loaded table */
    int64_t last_check_ms;
    bool force_check;
    char *last_error; /* the reload error last logged, to log each once */
};

struct problem_log {
    const char *path;
    size_t count;
};

static void log_problem(size_t line, const char *message, void *ctx)
{
    struct problem_log *pl = ctx;
    if (pl->count++ >= PF_MAX_LOGGED_PROBLEMS)
        return;
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s:%zu: %s", pl->path, line, message);
    log_warn(COMPONENT, msg, NULL);
}

static struct file_id id_of(const struct stat *st)
{
    struct file_id id = {st->st_dev, st->st_ino, st->st_size, st->st_mtim};
    return id;
}

static bool same_id(const struct file_id *a, const struct file_id *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
    struct file_id x = id_of(a);
    struct file_id y = id_of(b);
    return same_id(&x, &y);
}

/* Reads the whole file from one descriptor; *id is that file's identity. */
static bool read_file(const char *path, char **data, size_t *len, struct file_id *id, char **error)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *error = xasprintf("cannot open %s: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *error = xasprintf("cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        *error = xasprintf("%s is not a regular file", path);
        close(fd);
        return false;
    }
    if ((uint64_t)st.st_size > PF_MAX_FILE_BYTES) {
        *error = xasprintf("%s is larger than %zu bytes", path, PF_MAX_FILE_BYTES);
        close(fd);
        return false;
    }
    /* The size may change while we read: read until EOF, not st_size bytes. */
    size_t cap = (size_t)st.st_size + 1;
    char *buf = xmalloc(cap);
    size_t n = 0;
    for (;;) {
        if (n == cap)
            buf = xgrow(buf, &cap, cap + 1, 1);
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            *error = xasprintf("cannot read %s: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return false;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > PF_MAX_FILE_BYTES) {
            *error = xasprintf("%s is larger than %zu bytes", path, PF_MAX_FILE_BYTES);
            free(buf);
            close(fd);
            return false;
        }
    }
    /* A writer rewriting the file in place while we read gives a torn copy:
     * refuse it and let the next check read the finished file. */
    struct stat after;
    bool torn = fstat(fd, &after) == 0 && !same_stat(&st, &after);
    close(fd);
    if (torn) {
        *error = xasprintf("%s changed while it was read (replace it with rename)", path);
        free(buf);
        return false;
    }
    *data = buf;
    *len = n;
    *id = id_of(&st);
    return true;
}

/* Reads and parses the file, logging its problems. */
static struct passwd_file *load(const char *path, struct file_id *id, char **error)
{
    char *data = NULL;
    size_t len = 0;
    if (!read_file(path, &data, &len, id, error))
        return NULL;
    struct problem_log pl = {.path = path};
    struct passwd_file *pf = passwd_file_parse(data, len, log_problem, &pl);
    free(data);
    if (pl.count > PF_MAX_LOGGED_PROBLEMS) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s: %zu more malformed lines not logged", path,
                 pl.count - PF_MAX_LOGGED_PROBLEMS);
        log_warn(COMPONENT, msg, NULL);
    }
    return pf;
}

/* Called with check_lock held. Logs `error` unless it was the last one logged. */
static void reload_failed(struct pf_db *db, char *error)
{
    if (db->last_error == NULL || strcmp(db->last_error, error) != 0) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "passwd-file reload failed, keeping the old table: %s", error);
        log_error(COMPONENT, msg, NULL);
    }
    free(db->last_error);
    db->last_error = error;
}

/* Reloads the table when the file changed (checked at most once a second). */
static void maybe_reload(struct pf_db *db)
{
    if (pthread_mutex_trylock(&db->check_lock) != 0)
        return; /* another worker is checking right now */
    int64_t now = clock_mono_ms();
    if (!db->force_check && now - db->last_check_ms < PF_CHECK_INTERVAL_MS) {
        pthread_mutex_unlock(&db->check_lock);
        return;
    }
    db->force_check = false;
    db->last_check_ms = now;
    struct stat st;
    if (stat(db->path, &st) != 0) {
        reload_failed(db, xasprintf("cannot stat %s: %s", db->path, strerror(errno)));
        pthread_mutex_unlock(&db->check_lock);
        return;
    }
    struct file_id current = id_of(&st);
    if (same_id(&current, &db->id)) {
        pthread_mutex_unlock(&db->check_lock);
        return;
    }
    char *error = NULL;
    struct passwd_file *pf = load(db->path, &current, &error);
    if (pf == NULL) {
        reload_failed(db, error);
        pthread_mutex_unlock(&db->check_lock);
        return;
    }
    size_t users = passwd_file_count(pf); /* pf may be replaced once check_lock is free */
    pthread_rwlock_wrlock(&db->table_lock);
    struct passwd_file *old = db->table;
    db->table = pf;
    pthread_rwlock_unlock(&db->table_lock);
    db->id = current;
    free(db->last_error);
    db->last_error = NULL;
    pthread_mutex_unlock(&db->check_lock);
    passwd_file_free(old);
    char path[512];
    log_info(COMPONENT, "passwd-file reloaded", "path=%s users=%zu",
             log_quote(path, sizeof(path), db->path), users);
}

static void pf_close(struct auth_db *head)
{
    struct pf_db *db = (struct pf_db *)head;
    passwd_file_free(db->table);
    pthread_rwlock_destroy(&db->table_lock);
    pthread_mutex_destroy(&db->check_lock);
    free(db->last_error);
    free(db->path);
    free(db);
}

static struct auth_db *pf_open(const struct auth_db_config *cfg, unsigned workers,
                               struct petrel_error *err)
{
    (void)workers; /* one table serves every worker */
    struct pf_db *db = xcalloc(1, sizeof(*db));
    db->path = xstrdup(cfg->path != NULL ? cfg->path : "");
    pthread_rwlock_init(&db->table_lock, NULL);
    pthread_mutex_init(&db->check_lock, NULL);
    char *error = NULL;
    db->table = load(db->path, &db->id, &error);
    if (db->table == NULL) {
        petrel_error_set(err, PETREL_ERR_IO, "passwd-file: %s", error);
        free(error);
        pf_close(&db->head);
        return NULL;
    }
    db->last_check_ms = clock_mono_ms();
    char path[512];
    log_info(COMPONENT, "passwd-file loaded", "path=%s users=%zu",
             log_quote(path, sizeof(path), db->path), passwd_file_count(db->table));
    return &db->head;
}

static enum auth_db_status pf_lookup(struct auth_db *head, unsigned worker, const char *username,
                                     bool want_password, struct userdb_entry **out, char **error)
{
    (void)worker;
    (void)error; /* the table in memory cannot fail */
    struct pf_db *db = (struct pf_db *)head;
    maybe_reload(db);
    pthread_rwlock_rdlock(&db->table_lock);
    const struct userdb_entry *found = passwd_file_find(db->table, username);
    struct userdb_entry *copy = found != NULL ? userdb_entry_clone(found) : NULL;
    pthread_rwlock_unlock(&db->table_lock);
    if (copy == NULL)
        return AUTH_DB_NOT_FOUND;
    if (!want_password) {
        free(copy->password);
        copy->password = NULL;
    }
    *out = copy;
    return AUTH_DB_OK;
}

static bool pf_iterate(struct auth_db *head, unsigned worker, char ***users, size_t *count,
                       char **error)
{
    (void)worker;
    (void)error;
    struct pf_db *db = (struct pf_db *)head;
    maybe_reload(db);
    pthread_rwlock_rdlock(&db->table_lock);
    size_t n = passwd_file_count(db->table);
    char **list = xcalloc(n + 1, sizeof(char *));
    /* the table is sorted bytewise and unique already */
    for (size_t i = 0; i < n; i++)
        list[i] = xstrdup(passwd_file_user_at(db->table, i));
    pthread_rwlock_unlock(&db->table_lock);
    *users = list;
    *count = n;
    return true;
}

void auth_db_passwd_file_recheck(struct auth_db *head)
{
    if (head->v != &auth_db_passwd_file_vfuncs)
        return;
    struct pf_db *db = (struct pf_db *)head;
    pthread_mutex_lock(&db->check_lock);
    db->force_check = true;
    pthread_mutex_unlock(&db->check_lock);
}

const struct auth_db_vfuncs auth_db_passwd_file_vfuncs = {
    .name = "passwd-file",
    .open = pf_open,
    .close = pf_close,
    .lookup = pf_lookup,
    .iterate = pf_iterate,
};
