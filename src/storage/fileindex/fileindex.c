/* fileindex: handles, freshness (refresh), transactions and folding.
 *
 * State of a handle (struct fi_state): the view (records, header), the base
 * it was built from (descriptor kept open, identity = dev/inode/size/mtime,
 * lineage, parent lineage) and the log (descriptor, identity, the offset up
 * to which transactions were applied).
 *
 * Refresh without the lock:
 *   - the base's identity unchanged and the log the same file: read only the
 *     log bytes after the applied offset and apply complete transactions
 *     ("incremental"; nothing new is "none"); an incomplete transaction at
 *     the tail is "not yet" and is never cut here;
 *   - the base replaced by a fold of our own lineage (FOLDED flag, parent
 *     lineage = ours, parent_log_size >= what we applied): apply the rest of
 *     the old log from the descriptor we still hold, up to exactly
 *     parent_log_size, then switch to the new base and log without rebuilding
 *     the view ("adopt");
 *   - otherwise load the base and log again ("full"); when they do not match
 *     (a writer between its two renames) retry under a shared lock;
 *   - an index without lineage (version 1) cannot prove freshness: every
 *     refresh reloads under a shared lock (site reload-fallback, result
 *     "fallback"), until the next writer folds it into a version 2 base
 *     (lineage_stamped_total).
 *
 * Files besides the four of fileindex.h: "<name>.tmp" while a new version
 * of a file is written, and petrel.index.log.2, the log replaced by the
 * last fold (kept only so that its deletion happens in the next fold,
 * never read).
 *
 * Writers (fileindex_begin) take the lock exclusively, refresh, cut a torn
 * log tail, and collect operations in a buffer; commit appends them to the
 * log as one transaction (fsync per policy) and applies the same bytes to
 * the view, so readers and the writer replay identical data. A log past
 * log_fold_bytes is folded into a new base before the lock is released.
 * replace_all, a version 1 index and an oversized transaction are written
 * as a new base directly. */
#include "storage/fileindex/fileindex-private.h"

#include "core/error.h"
#include "core/log.h"
#include "core/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fileindex_fault;

struct fileindex_txn {
    struct fileindex *fi;
    struct buf ops; /* FI_TXN_HDR_SIZE bytes of room, then the operations */
    size_t op_count;
    bool important; /* anything but flag changes (fsync policy "optimized") */
    uint32_t next_uid;
    uint64_t modseq;
    uint64_t cache_reset_id;
    /* UIDs appended in this transaction (ascending) and which of them were
     * expunged again */
    uint32_t *app_uids;
    uint64_t *app_sizes;
    uint8_t *app_gone;
    size_t app_count;
    size_t app_cap;
    size_t app_gone_count;
    /* positions of the target view expunged in this transaction */
    uint8_t *gone_bits;
    size_t gone_count;
    /* The aggregate's change: live records added and removed, bytes too
     * (the USAGE operation written at commit, fileindex-log.c). */
    uint64_t usage_added;
    uint64_t usage_removed;
    uint64_t bytes_added;
    uint64_t bytes_removed;
    bool force_usage;             /* fileindex_usage_recalc */
    struct fi_view *staged;       /* replace_all */
    bool in_memory;               /* fileindex_begin_sync on a read-only log */
    void (*on_commit)(void *arg); /* after a successful commit, still locked */
    void *on_commit_arg;
};

/* ---------- handles ---------- */

/* A handle on `dir`, or on the directory open as `held_fd` (duplicated)
 * when that is not -1. */
static struct fileindex *fi_alloc(const char *dir, int held_fd,
                                  const struct fileindex_settings *set, struct petrel_error *err)
{
    if (dir == NULL || *dir == '\0' || strlen(dir) > FI_MAX_DIR) {
        petrel_error_set(err, PETREL_ERR_INVALID, "index directory name empty or too long");
        return NULL;
    }
    int dir_fd = held_fd >= 0 ? fcntl(held_fd, F_DUPFD_CLOEXEC, 0)
                              : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        if (errno == ENOENT)
            petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no index in %s", dir);
        else
            fi_io_error(err, "cannot open", dir);
        return NULL;
    }
    struct fileindex *fi = xcalloc(1, sizeof(*fi));
    fi->dir_fd = dir_fd;
    fi->dir = xstrdup(dir);
    fi->base_path = xasprintf("%s/%s", dir, FI_BASE_FILE);
    fi->log_path = xasprintf("%s/%s", dir, FI_LOG_FILE);
    fi->cache_path = xasprintf("%s/%s", dir, FI_CACHE_FILE);
    fi->lock_path = xasprintf("%s/%s", dir, FI_LOCK_FILE);
    if (set != NULL)
        fi->set = *set;
    if (fi->set.log_fold_bytes == 0)
        fi->set.log_fold_bytes = FI_DEFAULT_FOLD_BYTES;
    fi->lock_fd = -1;
    fi_state_init(&fi->st);
    fi_cache_init(&fi->cache);
    fi_metrics_init(fi);
    return fi;
}

static void fi_free(struct fileindex *fi)
{
    fi_cache_free(&fi->cache);
    fi_state_free(&fi->st);
    if (fi->lock_fd >= 0)
        close(fi->lock_fd);
    close(fi->dir_fd);
    free(fi->dir);
    free(fi->base_path);
    free(fi->log_path);
    free(fi->cache_path);
    free(fi->lock_path);
    free(fi);
}

size_t fileindex_memory_bytes(const struct fileindex *fi)
{
    return fi->st.view.cap * sizeof(struct fileindex_record) + fi->st.view.names.bytes;
}

static bool exists(const struct fileindex *fi, const char *name)
{
    struct stat st;
    return fstatat(fi->dir_fd, name, &st, 0) == 0;
}

/* ---------- loading ---------- */

enum load_result { LOAD_OK, LOAD_RETRY, LOAD_FAIL };

static bool same_file(const struct fi_file_id *a, const struct stat *st)
{
    return a->dev == st->st_dev && a->ino == st->st_ino;
}

/* Builds a state from the files. Without `locked` a mismatch between base
 * and log (or, with `tail_needs_lock`, bytes after the last valid
 * transaction) asks the caller to retry under the lock. */
static enum load_result load_once(struct fileindex *fi, struct fi_state *out, bool locked,
                                  bool tail_needs_lock, struct fi_timing *t,
                                  struct petrel_error *err)
{
    fi_state_init(out);
    int fd = openat(fi->dir_fd, FI_BASE_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            fi_io_error(err, "cannot open", fi->base_path);
        else if (exists(fi, FI_LOG_FILE))
            petrel_error_set(err, PETREL_ERR_INVALID, "index base missing in %s", fi->dir);
        else
            petrel_error_set(err, PETREL_ERR_NOT_FOUND, "no index in %s", fi->dir);
        return LOAD_FAIL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        fi_io_error(err, "cannot stat", fi->base_path);
        close(fd);
        return LOAD_FAIL;
    }
    struct fi_base_info info;
    if (!fi_base_load(fd, (uint64_t)st.st_size, &out->view, &info, t, err)) {
        close(fd);
        return LOAD_FAIL;
    }
    out->base_fd = fd;
    fi_file_id_from_stat(&out->base_id, &st);
    out->version = info.version;
    out->base_flags = info.flags;
    out->parent_lineage = info.parent_lineage;
    out->parent_log_size = info.parent_log_size;
    if (info.version == FI_BASE_VERSION_NO_LINEAGE && !locked)
        return LOAD_RETRY;

    int lfd = openat(fi->dir_fd, FI_LOG_FILE, O_RDWR | O_CLOEXEC);
    out->log_writable = lfd >= 0;
    if (lfd < 0 && (errno == EACCES || errno == EROFS))
        lfd = openat(fi->dir_fd, FI_LOG_FILE, O_RDONLY | O_CLOEXEC);
    if (lfd < 0) {
        if (errno != ENOENT) {
            fi_io_error(err, "cannot open", fi->log_path);
            return LOAD_FAIL;
        }
        if (!locked)
            return LOAD_RETRY;
        petrel_error_set(err, PETREL_ERR_INVALID, "index log missing in %s", fi->dir);
        return LOAD_FAIL;
    }
    out->log_fd = lfd;
    if (fstat(lfd, &st) != 0) {
        fi_io_error(err, "cannot stat", fi->log_path);
        return LOAD_FAIL;
    }
    fi_file_id_from_stat(&out->log_id, &st);
    uint32_t log_version;
    uint64_t lineage;
    if (!fi_log_read_header(lfd, &log_version, &lineage, err))
        return LOAD_FAIL;
    if (info.version == FI_BASE_VERSION_NO_LINEAGE) {
        if (log_version != FI_LOG_VERSION_NO_LINEAGE) {
            petrel_error_set(err, PETREL_ERR_INVALID, "index log is newer than its base in %s",
                             fi->dir);
            return LOAD_FAIL;
        }
    } else if (lineage != info.hdr.lineage) {
        if (lineage == info.parent_lineage) {
            /* A writer folded this log into the base and stopped before
             * installing the new log: everything in it is in the base. */
            out->log_stale = true;
            out->log_applied = FI_LOG_HDR_SIZE;
            return LOAD_OK;
        }
        if (!locked)
            return LOAD_RETRY;
        petrel_error_set(err, PETREL_ERR_INVALID, "index log belongs to another base in %s",
                         fi->dir);
        return LOAD_FAIL;
    }
    enum fi_tail tail;
    if (!fi_log_replay(lfd, FI_LOG_HDR_SIZE, UINT64_MAX, locked, &out->view, &out->log_applied,
                       &tail, t, err))
        return LOAD_FAIL;
    if (tail == FI_TAIL_PENDING && tail_needs_lock && !locked)
        return LOAD_RETRY;
    return LOAD_OK;
}

/* load_once, retried under a shared lock (at `site`) when needed. */
static bool load_full(struct fileindex *fi, struct fi_state *out, enum fi_site site,
                      bool tail_needs_lock, struct fi_timing *t, struct petrel_error *err)
{
    bool locked = fi->lock_depth > 0;
    enum load_result r = load_once(fi, out, locked, tail_needs_lock, t, err);
    if (r == LOAD_RETRY) {
        fi_state_free(out);
        double waited = 0;
        if (!fi_lock(fi, FI_LOCK_SHARED, site, &waited, err))
            return false;
        if (t != NULL)
            t->part[FI_PART_LOCK] += waited;
        r = load_once(fi, out, true, tail_needs_lock, t, err);
        fi_unlock(fi);
    }
    if (r != LOAD_OK) {
        fi_state_free(out);
        return false;
    }
    return true;
}

static bool reload_into_handle(struct fileindex *fi, enum fi_site site, struct fi_timing *t,
                               struct petrel_error *err)
{
    struct fi_state ns;
    if (!load_full(fi, &ns, site, false, t, err))
        return false;
    fi_state_free(&fi->st);
    fi->st = ns;
    fi->need_reload = false;
    return true;
}

/* ---------- refresh ---------- */

enum adopt_result { ADOPT_OK, ADOPT_NO };

/* The base was replaced: is it a fold of exactly what we have (after
 * applying the rest of our log)? Then switch to it keeping the view. */
static enum adopt_result try_adopt(struct fileindex *fi, struct fi_timing *t)
{
    struct fi_state *s = &fi->st;
    if (s->version != FI_BASE_VERSION || s->log_stale || fi->need_reload ||
        s->view.names.bytes > FI_ADOPT_ARENA_MAX)
        return ADOPT_NO;
    int fd = openat(fi->dir_fd, FI_BASE_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ADOPT_NO;
    struct stat st;
    uint8_t hdr[FI_BASE_HDR_SIZE];
    struct fi_base_info info;
    int lfd = -1;
    if (fstat(fd, &st) != 0 || fi_pread_all(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) ||
        !fi_base_parse_header(hdr, (uint64_t)st.st_size, &info, NULL) ||
        info.version != FI_BASE_VERSION || (info.flags & FI_BASE_FLAG_FOLDED) == 0 ||
        info.parent_lineage != s->view.hdr.lineage || info.parent_log_size < s->log_applied)
        goto no;
    if (info.parent_log_size > s->log_applied) {
        uint64_t end;
        enum fi_tail tail;
        if (!fi_log_replay(s->log_fd, s->log_applied, info.parent_log_size, false, &s->view, &end,
                           &tail, t, NULL)) {
            fi->need_reload = true;
            goto no;
        }
        s->log_applied = end;
        if (end != info.parent_log_size)
            goto no;
    }
    const struct fileindex_header *h = &s->view.hdr;
    if (info.count != s->view.count || info.hdr.next_uid != h->next_uid ||
        info.hdr.highest_modseq != h->highest_modseq ||
        info.hdr.cache_reset_id != h->cache_reset_id || info.hdr.uid_validity != h->uid_validity ||
        memcmp(info.hdr.guid, h->guid, 16) != 0)
        goto no;
    lfd = openat(fi->dir_fd, FI_LOG_FILE,
                 s->log_writable ? O_RDWR | O_CLOEXEC : O_RDONLY | O_CLOEXEC);
    uint32_t log_version;
    uint64_t lineage;
    struct stat lst;
    if (lfd < 0 || fstat(lfd, &lst) != 0 ||
        !fi_log_read_header(lfd, &log_version, &lineage, NULL) || lineage != info.hdr.lineage)
        goto no;
    close(s->base_fd);
    close(s->log_fd);
    s->base_fd = fd;
    fi_file_id_from_stat(&s->base_id, &st);
    s->base_flags = info.flags;
    s->parent_lineage = info.parent_lineage;
    s->parent_log_size = info.parent_log_size;
    s->view.hdr.lineage = info.hdr.lineage;
    s->log_fd = lfd;
    fi_file_id_from_stat(&s->log_id, &lst);
    s->log_applied = FI_LOG_HDR_SIZE;
    return ADOPT_OK;
no:
    close(fd);
    if (lfd >= 0)
        close(lfd);
    return ADOPT_NO;
}

/* Applies what the log gained since the last read. */
static bool read_log_tail(struct fileindex *fi, bool locked, struct fi_timing *t,
                          enum fi_reload *result, struct petrel_error *err)
{
    struct fi_state *s = &fi->st;
    uint64_t end;
    enum fi_tail tail;
    if (!fi_log_replay(s->log_fd, s->log_applied, UINT64_MAX, locked, &s->view, &end, &tail, t,
                       err)) {
        fi->need_reload = true;
        return false;
    }
    if (end > s->log_applied && *result == FI_RELOAD_NONE)
        *result = FI_RELOAD_INCREMENTAL;
    s->log_applied = end;
    return true;
}

static bool refresh_apply(struct fileindex *fi, struct fi_timing *t, enum fi_reload *result,
                          struct petrel_error *err)
{
    bool locked = fi->lock_depth > 0;
    *result = FI_RELOAD_NONE;
    fi->log_size_seen_valid = false;
    if (fi->st.version == FI_BASE_VERSION_NO_LINEAGE && !locked) {
        double waited = 0;
        if (!fi_lock(fi, FI_LOCK_SHARED, FI_SITE_RELOAD_FALLBACK, &waited, err))
            return false;
        t->part[FI_PART_LOCK] += waited;
        bool ok = reload_into_handle(fi, FI_SITE_RELOAD_FALLBACK, t, err);
        fi_unlock(fi);
        *result = FI_RELOAD_FALLBACK;
        return ok;
    }
    if (fi->need_reload) {
        *result = FI_RELOAD_FULL;
        return reload_into_handle(fi, FI_SITE_READ, t, err);
    }
    struct stat st;
    if (fstatat(fi->dir_fd, FI_BASE_FILE, &st, 0) != 0) {
        if (errno == ENOENT)
            return petrel_error_set(err, PETREL_ERR_INVALID, "index base disappeared in %s",
                                    fi->dir);
        return fi_io_error(err, "cannot stat", fi->base_path);
    }
    struct fi_file_id id;
    fi_file_id_from_stat(&id, &st);
    if (!fi_file_id_equal(&id, &fi->st.base_id)) {
        if (try_adopt(fi, t) == ADOPT_OK) {
            *result = FI_RELOAD_ADOPT;
            return read_log_tail(fi, locked, t, result, err);
        }
        *result = FI_RELOAD_FULL;
        return reload_into_handle(fi, FI_SITE_READ, t, err);
    }
    if (fstatat(fi->dir_fd, FI_LOG_FILE, &st, 0) != 0 || !same_file(&fi->st.log_id, &st)) {
        *result = FI_RELOAD_FULL;
        return reload_into_handle(fi, FI_SITE_READ, t, err);
    }
    fi->log_size_seen = (uint64_t)st.st_size;
    fi->log_size_seen_valid = locked; /* nobody appends while we hold the lock */
    if ((uint64_t)st.st_size < fi->st.log_applied && !fi->st.log_stale) {
        /* Cut below what we applied: not by our protocol; trust the file. */
        *result = FI_RELOAD_FULL;
        return reload_into_handle(fi, FI_SITE_READ, t, err);
    }
    if (fi->st.log_stale || (uint64_t)st.st_size <= fi->st.log_applied)
        return true;
    return read_log_tail(fi, locked, t, result, err);
}

/* refresh_apply, counting what it took in from other writers (or could not
 * tell: an error counts too). */
static bool refresh_internal(struct fileindex *fi, struct fi_timing *t, enum fi_reload *result,
                             struct petrel_error *err)
{
    bool ok = refresh_apply(fi, t, result, err);
    if (!ok || *result != FI_RELOAD_NONE)
        fi->foreign_changes++;
    return ok;
}

bool fi_refresh_locked(struct fileindex *fi, struct petrel_error *err)
{
    if (fi->txn != NULL)
        return true;
    struct fi_timing t = {.start = fi_now()};
    enum fi_reload result;
    bool ok = refresh_internal(fi, &t, &result, err);
    fi_metric_reload(fi, ok ? result : FI_RELOAD_ERROR);
    return ok;
}

bool fileindex_refresh(struct fileindex *fi, struct petrel_error *err)
{
    fi->refreshes++;
    if (fi->txn != NULL)
        return true; /* we hold the lock exclusively: nobody else wrote */
    struct fi_timing t = {.start = fi_now()};
    enum fi_reload result;
    bool ok = refresh_internal(fi, &t, &result, err);
    fi_metric_reload(fi, ok ? result : FI_RELOAD_ERROR);
    fi_metric_read(fi, &t);
    return ok;
}

uint64_t fileindex_foreign_changes(const struct fileindex *fi)
{
    return fi->foreign_changes;
}

bool fileindex_log_grown(struct fileindex *fi)
{
    struct stat st;
    if (fi->need_reload || fi->st.log_stale || fi->st.log_fd < 0 || fstat(fi->st.log_fd, &st) != 0)
        return true;
    return (uint64_t)st.st_size != fi->st.log_applied;
}

/* ---------- create / open / close ---------- */

bool fileindex_create(const char *dir, const uint8_t guid[16], uint32_t uid_validity,
                      const struct fileindex_settings *set, struct petrel_error *err)
{
    if (dir == NULL || *dir == '\0' || strlen(dir) > FI_MAX_DIR)
        return petrel_error_set(err, PETREL_ERR_INVALID, "index directory name empty or too long");
    struct stat st;
    if (stat(dir, &st) != 0 && (errno != ENOENT || mkdir(dir, 0700) != 0))
        return fi_io_error(err, "cannot create directory", dir);
    struct fileindex *fi = fi_alloc(dir, -1, set, err);
    if (fi == NULL)
        return false;
    if (!fi_lock(fi, FI_LOCK_EXCLUSIVE, FI_SITE_WRITE, NULL, err)) {
        fi_free(fi);
        return false;
    }
    bool ok = true;
    if (exists(fi, FI_BASE_FILE)) {
        ok = petrel_error_set(err, PETREL_ERR_EXISTS, "an index exists in %s", dir);
    } else {
        /* A cache left by an earlier index must not answer for this one. */
        unlinkat(fi->dir_fd, FI_CACHE_FILE, 0);
        struct fi_view v;
        memset(&v, 0, sizeof(v));
        memcpy(v.hdr.guid, guid, 16);
        v.hdr.uid_validity = uid_validity;
        v.hdr.next_uid = 1;
        v.hdr.highest_modseq = 1;
        v.hdr.cache_reset_id = fi_random64() >> 16;
        v.hdr.lineage = fi_random64();
        struct fi_base_info info = {.version = FI_BASE_VERSION, .hdr = v.hdr};
        int bfd = -1;
        int lfd = -1;
        ok = fi_base_write(fi, &v, &info, &bfd, err) &&
             fi_log_create(fi, FI_LOG_VERSION, v.hdr.lineage, &lfd, err);
        if (bfd >= 0)
            close(bfd);
        if (lfd >= 0)
            close(lfd);
    }
    fi_unlock(fi);
    fi_free(fi);
    return ok;
}

struct fileindex *fileindex_open(const char *dir, const struct fileindex_settings *set,
                                 struct petrel_error *err)
{
    return fileindex_open_in(dir, -1, set, err);
}

struct fileindex *fileindex_open_in(const char *dir, int dir_fd,
                                    const struct fileindex_settings *set, struct petrel_error *err)
{
    struct fileindex *fi = fi_alloc(dir, dir_fd, set, err);
    if (fi == NULL)
        return NULL;
    struct fi_timing t = {.start = fi_now()};
    if (!load_full(fi, &fi->st, FI_SITE_OPEN_PROBE, true, &t, err)) {
        fi_free(fi);
        return NULL;
    }
    fi_metric_read(fi, &t);
    return fi;
}

void fileindex_close(struct fileindex *fi)
{
    if (fi == NULL)
        return;
    if (fi->txn != NULL)
        fileindex_txn_rollback(fi->txn);
    fi_free(fi);
}

/* ---------- reading ---------- */

const struct fileindex_header *fileindex_get_header(const struct fileindex *fi)
{
    return &fi->st.view.hdr;
}

size_t fileindex_count(const struct fileindex *fi)
{
    return fi->st.view.count;
}

const struct fileindex_record *fileindex_record_at(const struct fileindex *fi, size_t i)
{
    return i < fi->st.view.count ? &fi->st.view.recs[i] : NULL;
}

const struct fileindex_record *fileindex_lookup_uid(const struct fileindex *fi, uint32_t uid)
{
    bool found;
    size_t pos = fi_view_search(&fi->st.view, uid, &found);
    return found ? &fi->st.view.recs[pos] : NULL;
}

size_t fileindex_unseen(const struct fileindex *fi)
{
    return fi->st.view.unseen;
}

/* ---------- folding ---------- */

/* Keeps the log about to be replaced as petrel.index.log.2 (never read).
 * Without this the old log is deleted when its last descriptor closes,
 * which is usually a reader adopting the fold, and on ext4 that costs
 * milliseconds; this way the writer, already folding, deletes the log
 * before it. */
static void keep_previous_log(struct fileindex *fi)
{
    char *prev = xasprintf("%s.2", fi->log_path);
    if (unlinkat(fi->dir_fd, fi_name(fi, prev), 0) != 0 && errno != ENOENT)
        log_debug(FI_COMPONENT, "cannot remove the previous index log", "path=%s", prev);
    if (linkat(fi->dir_fd, FI_LOG_FILE, fi->dir_fd, fi_name(fi, prev), 0) != 0) {
        /* no hard links here: the last reader deletes the old log */
    }
    free(prev);
}

/* Writes `src` (the live view, or a staged one that then replaces it) as a
 * new base with a new lineage, then a new empty log. `pure`: the base is
 * exactly the current base plus the log as applied (others may adopt it). */
static bool fold(struct fileindex *fi, struct fi_view *src, bool pure, struct petrel_error *err)
{
    struct fi_state *s = &fi->st;
    bool staged = src != &s->view;
    struct fi_base_info info = {
        .version = FI_BASE_VERSION,
        .flags = pure ? FI_BASE_FLAG_FOLDED : 0,
        .hdr = src->hdr,
        .parent_lineage = s->view.hdr.lineage,
        .parent_log_size = s->log_applied,
    };
    info.hdr.lineage = fi_random64();
    int bfd = -1;
    if (!fi_base_write(fi, src, &info, &bfd, err)) {
        if (!staged && !pure)
            fi->need_reload = true;
        return false;
    }
    src->hdr.lineage = info.hdr.lineage;
    src->usage_suspect = false; /* the new base carries the sum of its records */
    info.flags |= FI_BASE_FLAG_USAGE;
    if (staged) {
        fi_view_free(&s->view);
        s->view = *src;
        memset(src, 0, sizeof(*src));
    }
    int lfd = -1;
    struct petrel_error lerr;
    if (fileindex_fault != FI_FAULT_FOLD_SKIP_LOG)
        keep_previous_log(fi);
    if (fileindex_fault == FI_FAULT_FOLD_SKIP_LOG ||
        !fi_log_create(fi, FI_LOG_VERSION, info.hdr.lineage, &lfd, &lerr)) {
        /* The base is in place; the old log now reads as folded (stale)
         * and the next writer replaces it. */
        if (fileindex_fault != FI_FAULT_FOLD_SKIP_LOG)
            log_warn(FI_COMPONENT, "cannot install the new index log", "dir=%s error=\"%s\"",
                     fi->dir, lerr.message);
        close(bfd);
        fi->need_reload = true;
        return true;
    }
    struct stat bst;
    struct stat lst;
    if (fstat(bfd, &bst) != 0 || fstat(lfd, &lst) != 0) {
        close(bfd);
        close(lfd);
        fi->need_reload = true;
        return true;
    }
    if (s->base_fd >= 0)
        close(s->base_fd);
    if (s->log_fd >= 0)
        close(s->log_fd);
    s->base_fd = bfd;
    fi_file_id_from_stat(&s->base_id, &bst);
    s->version = FI_BASE_VERSION;
    s->base_flags = info.flags;
    s->parent_lineage = info.parent_lineage;
    s->parent_log_size = info.parent_log_size;
    s->log_fd = lfd;
    s->log_writable = true;
    fi_file_id_from_stat(&s->log_id, &lst);
    s->log_applied = FI_LOG_HDR_SIZE;
    s->log_stale = false;
    if (s->view.names.bytes > FI_ADOPT_ARENA_MAX) {
        /* Names now live in a large arena: map the new base instead. */
        struct fi_state ns;
        struct petrel_error rerr;
        if (load_once(fi, &ns, true, false, NULL, &rerr) == LOAD_OK) {
            fi_state_free(&fi->st);
            fi->st = ns;
        } else {
            fi_state_free(&ns);
            fi->need_reload = true;
        }
    }
    return true;
}

/* ---------- transactions ---------- */

static struct fi_view *tview(struct fileindex_txn *t)
{
    return t->staged != NULL ? t->staged : &t->fi->st.view;
}

static void txn_reset_ops(struct fileindex_txn *t)
{
    buf_reset(&t->ops);
    uint8_t room[FI_TXN_HDR_SIZE] = {0};
    buf_append(&t->ops, room, sizeof(room));
    t->op_count = 0;
    t->important = false;
    t->app_count = 0;
    t->app_gone_count = 0;
    free(t->gone_bits);
    t->gone_bits = NULL;
    t->gone_count = 0;
    t->usage_added = 0;
    t->usage_removed = 0;
    t->bytes_added = 0;
    t->bytes_removed = 0;
}

static void txn_free(struct fileindex_txn *t)
{
    buf_free(&t->ops);
    free(t->app_uids);
    free(t->app_sizes);
    free(t->app_gone);
    free(t->gone_bits);
    if (t->staged != NULL) {
        fi_view_free(t->staged);
        free(t->staged);
    }
    free(t);
}

/* Under the exclusive lock after a refresh: drop a torn tail, replace a
 * stale log. */
static bool prepare_log(struct fileindex *fi, struct petrel_error *err)
{
    struct fi_state *s = &fi->st;
    if (s->version == FI_BASE_VERSION && s->log_stale) {
        int lfd;
        if (!fi_log_create(fi, FI_LOG_VERSION, s->view.hdr.lineage, &lfd, err))
            return false;
        struct stat st;
        if (fstat(lfd, &st) != 0) {
            close(lfd);
            return fi_io_error(err, "cannot stat", fi->log_path);
        }
        close(s->log_fd);
        s->log_fd = lfd;
        s->log_writable = true;
        fi_file_id_from_stat(&s->log_id, &st);
        s->log_applied = FI_LOG_HDR_SIZE;
        s->log_stale = false;
        return true;
    }
    if (!s->log_writable)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "index log is read-only: %s",
                                fi->log_path);
    struct stat st;
    if (fi->log_size_seen_valid)
        st.st_size = (off_t)fi->log_size_seen; /* the locked refresh's stat of this file */
    else if (fstat(s->log_fd, &st) != 0)
        return fi_io_error(err, "cannot stat", fi->log_path);
    fi->log_size_seen_valid = false;
    if ((uint64_t)st.st_size > s->log_applied) {
        /* The locked refresh scanned it: a torn tail, not corruption. */
        log_info(FI_COMPONENT, "cutting torn index log tail", "dir=%s offset=%llu size=%llu",
                 fi->dir, (unsigned long long)s->log_applied, (unsigned long long)st.st_size);
        if (ftruncate(s->log_fd, (off_t)s->log_applied) != 0 || !fi_sync(fi, s->log_fd, true))
            return fi_io_error(err, "cannot cut", fi->log_path);
    }
    return true;
}

static struct fileindex_txn *begin(struct fileindex *fi, bool memory_ok, struct petrel_error *err)
{
    if (fi->txn != NULL) {
        petrel_error_set(err, PETREL_ERR_CONFLICT, "a transaction is already open on %s", fi->dir);
        return NULL;
    }
    if (!fi_lock(fi, FI_LOCK_EXCLUSIVE, FI_SITE_WRITE, NULL, err))
        return NULL;
    struct fi_timing t = {.start = fi_now()};
    enum fi_reload result;
    bool ok = refresh_internal(fi, &t, &result, err);
    fi_metric_reload(fi, ok ? result : FI_RELOAD_ERROR);
    bool in_memory = ok && memory_ok && !fi->st.log_writable;
    if (ok && !in_memory)
        ok = prepare_log(fi, err);
    if (!ok) {
        fi_unlock(fi);
        return NULL;
    }
    struct fileindex_txn *txn = xcalloc(1, sizeof(*txn));
    txn->fi = fi;
    txn->in_memory = in_memory;
    txn_reset_ops(txn);
    txn->next_uid = fi->st.view.hdr.next_uid;
    txn->modseq = fi->st.view.hdr.highest_modseq;
    txn->cache_reset_id = fi->st.view.hdr.cache_reset_id;
    fi->txn = txn;
    return txn;
}

struct fileindex_txn *fileindex_begin(struct fileindex *fi, struct petrel_error *err)
{
    return begin(fi, false, err);
}

bool fileindex_read_only(const struct fileindex *fi)
{
    return !fi->st.log_writable;
}

struct fileindex_txn *fileindex_begin_sync(struct fileindex *fi, bool *in_memory,
                                           struct petrel_error *err)
{
    struct fileindex_txn *txn = begin(fi, true, err);
    *in_memory = txn != NULL && txn->in_memory;
    return txn;
}

static uint8_t *op_reserve(struct fileindex_txn *t, size_t n)
{
    buf_reserve(&t->ops, n);
    uint8_t *p = (uint8_t *)t->ops.data + t->ops.len;
    t->ops.len += n;
    t->op_count++;
    return p;
}

static size_t name_length(const char *name)
{
    if (name == NULL)
        return 0;
    size_t len = strnlen(name, FI_MAX_FILENAME + 1);
    return len <= FI_MAX_FILENAME ? len : 0;
}

static size_t live_count(const struct fileindex_txn *t)
{
    const struct fi_view *v = t->staged != NULL ? t->staged : &t->fi->st.view;
    return v->count - t->gone_count + t->app_count - t->app_gone_count;
}

/* Where `uid` is known to the transaction: in the view at *pos, or among
 * this transaction's appends at *app. */
static bool txn_find(struct fileindex_txn *t, uint32_t uid, size_t *pos, size_t *app)
{
    struct fi_view *v = tview(t);
    bool found;
    *pos = fi_view_search(v, uid, &found);
    *app = SIZE_MAX;
    if (found)
        return t->gone_bits == NULL || (t->gone_bits[*pos / 8] & (1u << (*pos % 8))) == 0;
    size_t lo = 0;
    size_t hi = t->app_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->app_uids[mid] < uid)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->app_count && t->app_uids[lo] == uid && !t->app_gone[lo]) {
        *pos = SIZE_MAX;
        *app = lo;
        return true;
    }
    return false;
}

uint32_t fileindex_txn_append(struct fileindex_txn *t, const struct fileindex_record *rec)
{
    size_t name_len = rec != NULL ? name_length(rec->filename) : 0;
    if (name_len == 0 || live_count(t) >= FI_MAX_RECORDS)
        return 0;
    uint32_t uid = rec->uid == 0 ? t->next_uid : rec->uid;
    if (uid < t->next_uid || uid == UINT32_MAX)
        return 0;
    uint64_t modseq = ++t->modseq;
    uint8_t *p = op_reserve(t, 1 + FI_OP_APPEND_FIXED + name_len);
    p[0] = FI_OP_APPEND;
    fi_put32(p + 1, uid);
    fi_put32(p + 5, rec->flags);
    fi_put32(p + 9, rec->keywords);
    fi_put64(p + 13, modseq);
    fi_put64(p + 21, rec->size);
    fi_put64(p + 29, rec->vsize);
    fi_put64(p + 37, (uint64_t)rec->internal_date);
    fi_put16(p + 45, (uint16_t)name_len);
    memcpy(p + 47, rec->filename, name_len);
    t->important = true;
    t->next_uid = uid + 1;
    if (t->app_count == t->app_cap) {
        size_t cap = t->app_cap;
        t->app_uids = xgrow(t->app_uids, &cap, t->app_count + 1, sizeof(*t->app_uids));
        t->app_sizes = xrealloc(t->app_sizes, cap * sizeof(*t->app_sizes));
        t->app_gone = xrealloc(t->app_gone, cap);
        t->app_cap = cap;
    }
    t->app_uids[t->app_count] = uid;
    t->app_sizes[t->app_count] = rec->size;
    t->app_gone[t->app_count] = 0;
    t->app_count++;
    t->usage_added++;
    t->bytes_added += rec->size;
    return uid;
}

bool fileindex_txn_set_flags(struct fileindex_txn *t, uint32_t uid, uint32_t flags,
                             uint32_t keywords)
{
    size_t pos;
    size_t app;
    if (!txn_find(t, uid, &pos, &app))
        return false;
    uint8_t *p = op_reserve(t, 1 + FI_OP_FLAGS_SIZE);
    p[0] = FI_OP_FLAGS;
    fi_put32(p + 1, uid);
    fi_put32(p + 5, flags);
    fi_put32(p + 9, keywords);
    fi_put64(p + 13, ++t->modseq);
    return true;
}

bool fileindex_txn_set_filename(struct fileindex_txn *t, uint32_t uid, const char *filename)
{
    size_t len = name_length(filename);
    size_t pos;
    size_t app;
    if (len == 0 || !txn_find(t, uid, &pos, &app))
        return false;
    uint8_t *p = op_reserve(t, 1 + 6 + len);
    p[0] = FI_OP_NAME;
    fi_put32(p + 1, uid);
    fi_put16(p + 5, (uint16_t)len);
    memcpy(p + 7, filename, len);
    t->important = true;
    return true;
}

bool fileindex_txn_expunge(struct fileindex_txn *t, uint32_t uid)
{
    size_t pos;
    size_t app;
    if (!txn_find(t, uid, &pos, &app))
        return false;
    if (app != SIZE_MAX) {
        t->app_gone[app] = 1;
        t->app_gone_count++;
        t->bytes_removed += t->app_sizes[app];
    } else {
        if (t->gone_bits == NULL)
            t->gone_bits = xcalloc(tview(t)->count / 8 + 1, 1);
        t->gone_bits[pos / 8] |= (uint8_t)(1u << (pos % 8));
        t->gone_count++;
        t->bytes_removed += tview(t)->recs[pos].size;
    }
    t->usage_removed++;
    uint8_t *p = op_reserve(t, 1 + 4);
    p[0] = FI_OP_EXPUNGE;
    fi_put32(p + 1, uid);
    ++t->modseq;
    t->important = true;
    return true;
}

void fileindex_txn_set_next_uid(struct fileindex_txn *t, uint32_t next_uid)
{
    if (next_uid > t->next_uid) {
        t->next_uid = next_uid;
        t->important = true;
    }
}

void fileindex_txn_set_cache_reset_id(struct fileindex_txn *t, uint64_t id)
{
    t->cache_reset_id = id;
    t->important = true;
}

bool fileindex_txn_replace_all(struct fileindex_txn *t, const struct fileindex_header *header,
                               const struct fileindex_record *records, size_t count,
                               struct petrel_error *err)
{
    if (count > FI_MAX_RECORDS)
        return petrel_error_set(err, PETREL_ERR_INVALID, "too many messages for one index (%zu)",
                                count);
    uint32_t prev = 0;
    uint64_t highest = 0;
    for (size_t i = 0; i < count; i++) {
        if (records[i].uid <= prev || records[i].uid == UINT32_MAX)
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "records not in ascending uid order at %zu", i);
        if (name_length(records[i].filename) == 0)
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "file name of uid %u empty or too long", records[i].uid);
        prev = records[i].uid;
        if (records[i].modseq > highest)
            highest = records[i].modseq;
    }
    const struct fi_view *old = &t->fi->st.view;
    struct fi_view *v = xcalloc(1, sizeof(*v));
    v->hdr = *header;
    v->hdr.lineage = old->hdr.lineage;
    bool same_identity = header->uid_validity == old->hdr.uid_validity;
    if (same_identity && old->hdr.next_uid > v->hdr.next_uid)
        v->hdr.next_uid = old->hdr.next_uid;
    if (v->hdr.next_uid <= prev)
        v->hdr.next_uid = prev + 1;
    if (v->hdr.next_uid == 0)
        v->hdr.next_uid = 1;
    if (!same_identity) /* other UIDs: cached fields must not answer for them */
        v->hdr.cache_reset_id = old->hdr.cache_reset_id + 1;
    if (highest < old->hdr.highest_modseq)
        highest = old->hdr.highest_modseq;
    if (highest < header->highest_modseq)
        highest = header->highest_modseq;
    if (highest < t->modseq)
        highest = t->modseq;
    fi_view_alloc(v, count + 64);
    size_t j = 0;
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        struct fileindex_record *r = &v->recs[i];
        *r = records[i];
        while (j < old->count && old->recs[j].uid < r->uid)
            j++;
        const struct fileindex_record *o =
            same_identity && j < old->count && old->recs[j].uid == r->uid ? &old->recs[j] : NULL;
        if (o != NULL)
            kept++;
        if (r->modseq == 0 || (o != NULL && (o->flags != r->flags || o->keywords != r->keywords)))
            r->modseq = ++highest;
        r->filename = fi_arena_dup(&v->names, records[i].filename, strlen(records[i].filename));
        if ((r->flags & FILEINDEX_SEEN_BIT) == 0)
            v->unseen++;
        v->bytes += r->size;
    }
    if (kept < old->count)
        highest++; /* messages went away: that is a change too */
    v->count = count;
    v->hdr.highest_modseq = highest;
    if (t->staged != NULL) {
        fi_view_free(t->staged);
        free(t->staged);
    }
    t->staged = v;
    txn_reset_ops(t);
    t->important = true;
    t->next_uid = v->hdr.next_uid;
    t->modseq = v->hdr.highest_modseq;
    t->cache_reset_id = v->hdr.cache_reset_id;
    return true;
}

/* A complete transaction whose sync failed: take it back without leaving
 * readers that already applied it at an offset that no longer exists. */
static void withdraw_txn(struct fileindex *fi)
{
    struct fi_state *s = &fi->st;
    int lfd = -1;
    struct petrel_error rerr;
    struct stat st;
    if (fi_log_rewrite_prefix(fi, s->log_fd, s->log_applied, &lfd, &rerr) && fstat(lfd, &st) == 0) {
        close(s->log_fd);
        s->log_fd = lfd;
        fi_file_id_from_stat(&s->log_id, &st);
        return;
    }
    if (lfd >= 0)
        close(lfd);
    /* Could not even do that: leave the transaction in place (it is
     * complete and checksummed) and reload to match the file. */
    log_error(FI_COMPONENT, "cannot withdraw an unsynced index transaction", "dir=%s", fi->dir);
    fi->need_reload = true;
}

static void txn_end(struct fileindex_txn *t)
{
    struct fileindex *fi = t->fi;
    fi->txn = NULL;
    txn_free(t);
    fi_unlock(fi);
}

bool fileindex_txn_commit(struct fileindex_txn *t, struct petrel_error *err)
{
    struct fileindex *fi = t->fi;
    struct fi_state *s = &fi->st;
    struct fi_view *target = tview(t);
    bool header_changed = t->next_uid != target->hdr.next_uid ||
                          t->modseq != target->hdr.highest_modseq ||
                          t->cache_reset_id != target->hdr.cache_reset_id;
    bool changed = t->op_count > 0 || header_changed || t->force_usage;
    /* The aggregate after the transaction, in the same write as the
     * records that change it, in every transaction (so the log's last one
     * always has it, for a reader from the tail), which also heals one
     * found missing or wrong. The seal is filled in below once the
     * transaction's offset is known. */
    if (t->staged == NULL) {
        uint64_t live = target->count - target->expunged_marks;
        uint8_t *u = op_reserve(t, 1 + FI_OP_TOTALS_SIZE);
        u[0] = FI_OP_TOTALS;
        fi_put32(u + 1, (uint32_t)(live + t->usage_added - t->usage_removed));
        fi_put64(u + 5, target->bytes + t->bytes_added - t->bytes_removed);
        fi_put32(u + 13, 0);
        fi_put32(u + 17, 0);
    }
    uint8_t *p = op_reserve(t, 1 + FI_OP_HEADER_SIZE);
    p[0] = FI_OP_HEADER;
    fi_put32(p + 1, t->next_uid);
    fi_put64(p + 5, t->modseq);
    fi_put64(p + 13, t->cache_reset_id);
    const uint8_t *body = (const uint8_t *)t->ops.data + FI_TXN_HDR_SIZE;
    size_t body_len = t->ops.len - FI_TXN_HDR_SIZE;
    bool stamp = s->version != FI_BASE_VERSION;
    bool ok = true;
    if (t->in_memory) {
        /* The log cannot be written: this handle's view takes the changes
         * and nobody else sees them; nothing on disk changes, so a refresh
         * keeps them (a reload from disk would drop them, and the next sync
         * would find the same news again). */
        if (t->staged != NULL) {
            ok = petrel_error_set(err, PETREL_ERR_PERMISSION, "index log is read-only: %s",
                                  fi->log_path);
        } else if (changed) {
            ok = fi_log_apply(&s->view, body, body_len, err);
            if (!ok)
                fi->need_reload = true;
            fi_view_compact(&s->view);
        }
    } else if (t->staged != NULL || stamp || t->ops.len > FI_MAX_TXN) {
        /* Written as a new base. */
        ok = fi_log_apply(target, body, body_len, err);
        fi_view_compact(target);
        if (!ok && t->staged == NULL)
            fi->need_reload = true;
        if (ok)
            ok = fold(fi, target, false, err);
        if (ok && stamp) {
            fi_metric_stamped(fi);
            log_info(FI_COMPONENT, "index lineage stamped", "dir=%s", fi->dir);
        }
    } else if (changed) {
        bool visible;
        uint8_t *totals = (uint8_t *)t->ops.data + t->ops.len - FI_TXN_TRAILER_SIZE;
        PETREL_ASSERT(totals[0] == FI_OP_TOTALS);
        fi_put32(totals + 13, (uint32_t)t->ops.len);
        fi_put32(totals + 17, fi_totals_seal(s->log_applied, (uint32_t)t->ops.len,
                                             fi_get32(totals + 1), fi_get64(totals + 5)));
        ok = fi_log_write_txn(fi, s->log_fd, s->log_applied, (uint8_t *)t->ops.data, t->ops.len,
                              t->important, &visible, err);
        if (!ok && visible)
            withdraw_txn(fi);
        if (ok) {
            s->log_applied += t->ops.len;
            if (!fi_log_apply(&s->view, body, body_len, err)) {
                fi->need_reload = true;
                ok = false;
            }
            fi_view_compact(&s->view);
        }
        if (ok && s->log_applied > fi->set.log_fold_bytes) {
            struct petrel_error ferr;
            if (!fold(fi, &s->view, true, &ferr))
                log_warn(FI_COMPONENT, "index log fold failed", "dir=%s error=\"%s\"", fi->dir,
                         ferr.message);
        }
    }
    if (ok && t->on_commit != NULL)
        t->on_commit(t->on_commit_arg);
    txn_end(t);
    return ok;
}

void fileindex_txn_on_commit(struct fileindex_txn *t, void (*fn)(void *arg), void *arg)
{
    t->on_commit = fn;
    t->on_commit_arg = arg;
}

void fileindex_txn_rollback(struct fileindex_txn *t)
{
    if (t != NULL)
        txn_end(t);
}

bool fileindex_optimize(struct fileindex *fi, struct petrel_error *err)
{
    if (fi->txn != NULL)
        return petrel_error_set(err, PETREL_ERR_CONFLICT, "a transaction is open on %s", fi->dir);
    if (!fileindex_refresh(fi, err))
        return false;
    struct stat st;
    if (fi->st.version == FI_BASE_VERSION && !fi->st.log_stale &&
        fi->st.log_applied == FI_LOG_HDR_SIZE && fstat(fi->st.log_fd, &st) == 0 &&
        (uint64_t)st.st_size == FI_LOG_HDR_SIZE)
        return true;
    if (!fi_lock(fi, FI_LOCK_EXCLUSIVE, FI_SITE_WRITE, NULL, err))
        return false;
    bool ok = fi_refresh_locked(fi, err);
    bool stamp = fi->st.version != FI_BASE_VERSION;
    if (ok && (stamp || fi->st.log_stale || fi->st.log_applied != FI_LOG_HDR_SIZE ||
               fstat(fi->st.log_fd, &st) != 0 || (uint64_t)st.st_size != FI_LOG_HDR_SIZE)) {
        ok = fold(fi, &fi->st.view, true, err);
        if (ok && stamp)
            fi_metric_stamped(fi);
    }
    fi_unlock(fi);
    return ok;
}

bool fi_set_cache_reset_id(struct fileindex *fi, uint64_t id, struct petrel_error *err)
{
    if (fi->txn != NULL) {
        fileindex_txn_set_cache_reset_id(fi->txn, id);
        return true;
    }
    struct fileindex_txn *t = fileindex_begin(fi, err);
    if (t == NULL)
        return false;
    fileindex_txn_set_cache_reset_id(t, id);
    return fileindex_txn_commit(t, err);
}

uint64_t fi_current_cache_reset_id(const struct fileindex *fi)
{
    return fi->txn != NULL ? fi->txn->cache_reset_id : fi->st.view.hdr.cache_reset_id;
}

/* ---------- usage ---------- */

void fileindex_get_usage(const struct fileindex *fi, struct fileindex_usage *out)
{
    const struct fi_view *v = &fi->st.view;
    out->messages = v->count - v->expunged_marks;
    out->bytes = v->bytes;
}

bool fileindex_usage_recalc(struct fileindex *fi, struct fileindex_usage *out,
                            struct petrel_error *err)
{
    struct fileindex_txn *t = fileindex_begin(fi, err);
    if (t == NULL)
        return false;
    /* From the records themselves, not from what the view kept. */
    struct fi_view *v = &fi->st.view;
    uint64_t bytes = 0;
    for (size_t i = 0; i < v->count; i++) {
        if (v->recs[i].filename != NULL)
            bytes += v->recs[i].size;
    }
    if (bytes != v->bytes)
        log_warn(FI_COMPONENT, "index aggregate disagreed with its records, rebuilt",
                 "dir=%s bytes_kept=%llu bytes_summed=%llu", fi->dir, (unsigned long long)v->bytes,
                 (unsigned long long)bytes);
    v->bytes = bytes;
    t->force_usage = true;
    if (!fileindex_txn_commit(t, err))
        return false;
    if (out != NULL)
        fileindex_get_usage(fi, out);
    return true;
}
