/* fileindex internals shared by the fileindex*.c files: file-format
 * constants, the in-memory view, the per-handle state and the helpers each
 * file exports to the others. Nothing outside src/storage/fileindex/ uses
 * this header except the unit tests and the benchmark (format constants,
 * fault hooks, memory accounting).
 *
 * In-memory layout (the performance budget is < 64 bytes per message):
 *   - records are one packed array of the public struct fileindex_record
 *     (56 bytes on LP64), so record_at() is a pointer into it and
 *     lookup_uid() a binary search;
 *   - file names of records loaded from a base point into the read-only
 *     mapping of that base's string table (page cache, shared between
 *     processes, not heap); names that arrived through the log are copied
 *     into a chunked arena that never moves;
 *   - the mappings a view points into are kept in a list and unmapped
 *     with the view. */
#ifndef PETREL_STORAGE_FILEINDEX_PRIVATE_H
#define PETREL_STORAGE_FILEINDEX_PRIVATE_H

#include "core/buf.h"
#include "core/crc32c.h"
#include "core/fs-util.h"
#include "storage/fileindex/fileindex.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#define FI_COMPONENT "fileindex"

#define FI_BASE_FILE "petrel.index"
#define FI_LOG_FILE "petrel.index.log"
#define FI_CACHE_FILE "petrel.index.cache"
#define FI_LOCK_FILE "petrel.index.lock"

/* ---------- limits ---------- */
#define FI_MAX_RECORDS 10000000u
#define FI_MAX_FILENAME 1024u
#define FI_MAX_FIELD 64u
#define FI_MAX_FIELDS 256u /* distinct cache field names per handle */
#define FI_MAX_CACHE_DATA (1024u * 1024u)
#define FI_MAX_DIR 3000u
#define FI_MAX_TXN (16u * 1024u * 1024u) /* one log transaction, header included */
#define FI_MAX_STRINGS 0xffffffffu       /* name offsets are 32-bit */
#define FI_DEFAULT_FOLD_BYTES (1024u * 1024u)
/* After a fold the view keeps pointing into the old mapping plus the arena;
 * beyond this much arena it reloads from the new base to stay compact. */
#define FI_ADOPT_ARENA_MAX (1024u * 1024u)
#define FI_CACHE_CEILING ((uint64_t)1 << 32)

/* ---------- base file (fileindex-base.c) ---------- */
#define FI_BASE_MAGIC "PTRLIDX" /* 8 bytes with the NUL */
#define FI_BASE_VERSION 2
#define FI_BASE_VERSION_NO_LINEAGE 1
#define FI_BASE_HDR_SIZE 128u
#define FI_BASE_REC_SIZE 48u
#define FI_BASE_FLAG_FOLDED 0x1u /* == parent base + parent log up to parent_log_size */
#define FI_BASE_FLAG_USAGE 0x2u  /* usage_bytes_lo/hi hold the sum of the record sizes */

/* ---------- log file (fileindex-log.c) ---------- */
#define FI_LOG_MAGIC "PTRLLOG"
#define FI_LOG_VERSION 2
#define FI_LOG_VERSION_NO_LINEAGE 1
#define FI_LOG_HDR_SIZE 48u
#define FI_TXN_HDR_SIZE 16u

enum fi_op {
    FI_OP_APPEND = 1,
    FI_OP_FLAGS = 2,
    FI_OP_NAME = 3,
    FI_OP_EXPUNGE = 4,
    FI_OP_HEADER = 5,
    FI_OP_USAGE = 6,  /* older writers' aggregate; still read */
    FI_OP_TOTALS = 7, /* the aggregate and the transaction's own trailer */
};
#define FI_OP_APPEND_FIXED 46u /* after the op byte, before the name */
#define FI_OP_FLAGS_SIZE 20u
#define FI_OP_HEADER_SIZE 20u
#define FI_OP_USAGE_SIZE 12u
#define FI_OP_TOTALS_SIZE 20u
/* A transaction written by this version ends with TOTALS then HEADER: the
 * last FI_TXN_TRAILER_SIZE bytes of the log are where a reader from the
 * tail finds the aggregate (fileindex-usage.c). */
#define FI_TXN_TRAILER_SIZE (1u + FI_OP_TOTALS_SIZE + 1u + FI_OP_HEADER_SIZE)

/* ---------- cache file (fileindex-cache.c) ---------- */
#define FI_CACHE_MAGIC "PTRLCCH"
#define FI_CACHE_VERSION 1
#define FI_CACHE_HDR_SIZE 32u
#define FI_CACHE_REC_HDR 20u

/* ---------- test hooks ---------- */
enum fi_fault {
    FI_FAULT_NONE = 0,
    FI_FAULT_PURGE_SKIP_INDEX, /* purge writes the new cache, then "crashes" */
    FI_FAULT_FOLD_SKIP_LOG,    /* fold renames the base, then "crashes" */
    FI_FAULT_LOG_SYNC,         /* the log's fsync fails after a complete write */
};
extern int fileindex_fault;
/* Seconds a lock request waits (30 by default; tests shorten it). */
extern double fileindex_lock_timeout;
/* Cache offset ceiling (4 GiB; tests lower it). */
extern uint64_t fileindex_cache_ceiling;

/* ---------- little-endian helpers ---------- */
static inline void fi_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void fi_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline void fi_put64(uint8_t *p, uint64_t v)
{
    fi_put32(p, (uint32_t)v);
    fi_put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint16_t fi_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t fi_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t fi_get64(const uint8_t *p)
{
    return (uint64_t)fi_get32(p) | ((uint64_t)fi_get32(p + 4) << 32);
}

/* The files' checksum, CRC-32C (core/crc32c.h; thread-safe). Chain:
 * crc = fi_crc32c(crc, ...), from 0. */
static inline uint32_t fi_crc32c(uint32_t crc, const void *data, size_t len)
{
    return crc32c(crc, data, len);
}
static inline uint32_t fi_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    return crc32c_sw(crc, data, len);
}

/* The seal of a TOTALS operation (fileindex-log.c): CRC-32C of the
 * transaction's offset and length and the aggregate, so that a reader that
 * reads only the trailer and the transaction's header can tell them from
 * other bytes (the transaction's own checksum covers them too, for readers
 * that read it whole). */
static inline uint32_t fi_totals_seal(uint64_t txn_offset, uint32_t txn_length, uint32_t messages,
                                      uint64_t bytes)
{
    uint8_t b[24];
    fi_put64(b, txn_offset);
    fi_put32(b + 8, txn_length);
    fi_put32(b + 12, messages);
    fi_put64(b + 16, bytes);
    return fi_crc32c(0, b, sizeof(b));
}

/* ---------- memory ---------- */
struct fi_chunk;
/* Names copied from the log: chunks that never move, freed together. */
struct fi_arena {
    struct fi_chunk *head;
    size_t bytes; /* allocated */
};
const char *fi_arena_dup(struct fi_arena *a, const char *s, size_t len);
void fi_arena_free(struct fi_arena *a);

struct fi_map {
    void *addr;
    size_t len;
    struct fi_map *next;
};

struct fi_view {
    struct fileindex_header hdr;
    struct fileindex_record *recs;
    size_t count;
    size_t cap;
    bool recs_mapped; /* recs is an anonymous mapping (large arrays) */
    size_t unseen;
    size_t expunged_marks; /* records marked (filename NULL) awaiting compaction */
    /* The folder's aggregate: the sum of `size` over live records (their
     * count is count - expunged_marks), kept by every change to records.
     * usage_suspect: what the files say about it (base header, the last
     * USAGE operation) was missing or disagreed with the records, so the
     * next transaction writes it (fileindex-usage.c). */
    uint64_t bytes;
    bool usage_suspect;
    struct fi_map *maps;
    struct fi_arena names;
};

/* Allocates room for `cap` records (the view has none yet). */
void fi_view_alloc(struct fi_view *v, size_t cap);
void fi_view_free(struct fi_view *v);
void fi_view_reserve(struct fi_view *v, size_t extra);
/* Position of `uid` or of the first larger record. */
size_t fi_view_search(const struct fi_view *v, uint32_t uid, bool *found);
/* Drops the records marked as expunged. */
void fi_view_compact(struct fi_view *v);
void fi_view_add_map(struct fi_view *v, void *addr, size_t len);

/* ---------- per-handle state ---------- */
struct fi_file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_sec;
    long mtime_nsec;
};

/* What a handle knows about the files its view was built from. */
struct fi_state {
    struct fi_view view;
    int base_fd; /* kept open: the inode cannot be reused while we compare */
    struct fi_file_id base_id;
    uint32_t version; /* 1: no lineage (older format), 2 */
    uint32_t base_flags;
    uint64_t parent_lineage;
    uint64_t parent_log_size;
    int log_fd;
    bool log_writable;
    struct fi_file_id log_id;
    uint64_t log_applied; /* offset after the last applied transaction */
    bool log_stale;       /* the log belongs to the parent lineage: already folded */
};
void fi_state_init(struct fi_state *s);
void fi_state_free(struct fi_state *s);

enum fi_lock_mode { FI_LOCK_NONE = 0, FI_LOCK_SHARED = 1, FI_LOCK_EXCLUSIVE = 2 };
enum fi_site {
    FI_SITE_OPEN_PROBE,
    FI_SITE_RELOAD_FALLBACK,
    FI_SITE_READ,
    FI_SITE_WRITE,
    FI_SITE_COUNT
};
enum fi_reload {
    FI_RELOAD_NONE,
    FI_RELOAD_INCREMENTAL,
    FI_RELOAD_FULL,
    FI_RELOAD_ADOPT,
    FI_RELOAD_FALLBACK,
    FI_RELOAD_ERROR,
    FI_RELOAD_COUNT
};
enum fi_part { FI_PART_LOCK, FI_PART_RELOAD, FI_PART_BUILD, FI_PART_COUNT };

struct fi_metrics {
    struct metric_family *read_seconds;
    struct metric_family *read_part;
    struct metric_family *lock_acquired;
    struct metric_family *lock_wait;
    struct metric_family *lock_release;
    struct metric_family *lock_reentrant;
    struct metric_family *reload;
    struct metric_family *stamped;
    /* series, looked up on first use */
    struct metric_series *read_s;
    struct metric_series *part_s[FI_PART_COUNT];
    struct metric_series *reload_s[FI_RELOAD_COUNT];
    struct metric_series *stamped_s;
    struct metric_series *acq_s[2][FI_SITE_COUNT];
    struct metric_series *wait_s[2][FI_SITE_COUNT];
    struct metric_series *rel_s[2][FI_SITE_COUNT];
    struct metric_series *reent_s[2][FI_SITE_COUNT];
};

/* Timing of one read, for read_seconds / read_part_seconds. */
struct fi_timing {
    double start;
    double part[FI_PART_COUNT];
};

struct fi_cache_entry {
    uint32_t uid;
    uint32_t off;   /* record offset in the cache file (the 4 GiB ceiling) */
    uint16_t field; /* interned field id + 1; 0 = empty slot */
};

struct fi_cache {
    int fd;
    struct fi_file_id id;
    uint64_t generation;
    uint64_t scanned; /* offset after the last valid record */
    bool header_bad;
    struct fi_cache_entry *slots;
    size_t slot_count; /* power of two */
    size_t used;
    char *fields[FI_MAX_FIELDS];
    size_t field_count;
    struct buf data; /* the value returned by fileindex_cache_get */
    /* The last block read for fileindex_cache_get (records of one FETCH are
     * mostly neighbours in the file, so one read serves many). Records at
     * an offset never change while the file keeps its inode: appends only
     * add after the last valid record, and a purge or drop makes a new file
     * (cache_close empties the window). Every record is still checked. */
    struct buf window;
    uint64_t window_off;
    bool ceiling_logged;
    /* The file was looked up and scanned for other writers' records at
     * this fileindex_refresh(): until the next one, reads trust the open
     * descriptor and the map (a record appended meanwhile by another
     * process is only a miss, and records are checked when read). */
    bool checked;
    uint64_t checked_at;
    /* Records queued by fileindex_cache_queue, back to back, their offset
     * and checksum filled in by the flush that writes them all at once;
     * made for the index identity queued_reset_id. */
    struct buf queued;
    size_t queued_count;
    uint64_t queued_reset_id;
};

struct fileindex {
    char *dir;
    /* The index directory, open for the handle's life: every file of the
     * index is reached relative to it (one path component to look up, not
     * the whole path), and a handle keeps working on its own directory
     * when the folder is renamed rather than half on a new one. */
    int dir_fd;
    char *base_path;
    char *log_path;
    char *cache_path;
    char *lock_path;
    struct fileindex_settings set;
    struct fi_state st;
    bool need_reload;         /* the view may differ from the files: reload next */
    uint64_t foreign_changes; /* see fileindex_foreign_changes */
    /* The log's size as the last locked refresh found it by path (the
     * same file as log_fd), so preparing a write need not fstat again. */
    uint64_t log_size_seen;
    bool log_size_seen_valid;
    struct fileindex_txn *txn;
    /* folder lock */
    int lock_fd;
    enum fi_lock_mode lock_mode;
    unsigned lock_depth;
    enum fi_site lock_site;
    double lock_since;
    /* metrics (NULL families when settings.metrics is NULL) */
    struct fi_metrics m;
    struct fi_cache cache;
    uint64_t refreshes; /* fileindex_refresh() calls: the cache's epochs */
};

/* ---------- fileindex-util.c ---------- */
double fi_now(void);
uint64_t fi_random64(void);
/* Reads up to len bytes at off; returns the count (short at EOF), -1 on error. */
ssize_t fi_pread_all(int fd, void *data, size_t len, uint64_t off);
void fi_file_id_from_stat(struct fi_file_id *id, const struct stat *st);
bool fi_file_id_equal(const struct fi_file_id *a, const struct fi_file_id *b);
/* fsync according to the policy: `important` data is synced under
 * `optimized` too; nothing is synced under `never`. */
bool fi_sync(const struct fileindex *fi, int fd, bool important);
bool fi_sync_dir(const struct fileindex *fi);
/* Writes `len` bytes as the whole content of `path` through a temporary file
 * (fsync, rename, directory fsync). Returns the open descriptor of the new
 * file (read-write) in *fd_out when not NULL. */
/* The name within fi->dir of `path`, one of the handle's *_path strings or
 * a name built from one: what the *at system calls take with fi->dir_fd
 * (the full paths stay for messages). */
const char *fi_name(const struct fileindex *fi, const char *path);
/* Opens "<path>.tmp" for a new version of `path` (caller holds the lock). */
int fi_tmp_create(const struct fileindex *fi, const char *path, char **tmp_out,
                  struct petrel_error *err);
/* fsync, rename over `path`, directory fsync; frees `tmp`. On failure the
 * temporary file is removed and `fd` closed. */
bool fi_tmp_install(struct fileindex *fi, int fd, char *tmp, const char *path,
                    struct petrel_error *err);
bool fi_replace_file(struct fileindex *fi, const char *path, const void *data, size_t len,
                     int *fd_out, struct petrel_error *err);
bool fi_io_error(struct petrel_error *err, const char *what, const char *path);

/* ---------- fileindex-lock.c ---------- */
void fi_metrics_init(struct fileindex *fi);
bool fi_lock(struct fileindex *fi, enum fi_lock_mode mode, enum fi_site site, double *waited,
             struct petrel_error *err);
/* fi_lock with its own wait limit (seconds). */
bool fi_lock_timed(struct fileindex *fi, enum fi_lock_mode mode, enum fi_site site, double timeout,
                   double *waited, struct petrel_error *err);
void fi_unlock(struct fileindex *fi);
void fi_metric_reload(struct fileindex *fi, enum fi_reload result);
void fi_metric_read(struct fileindex *fi, const struct fi_timing *t);
void fi_metric_stamped(struct fileindex *fi);

/* ---------- fileindex-base.c ---------- */
struct fi_base_info {
    uint32_t version;
    uint32_t flags;
    struct fileindex_header hdr;
    uint64_t parent_lineage;
    uint64_t parent_log_size;
    uint32_t count;
    uint64_t strings_size;
    uint64_t usage_bytes; /* with FI_BASE_FLAG_USAGE */
};
/* Parses and checks a base header (the first FI_BASE_HDR_SIZE bytes). */
bool fi_base_parse_header(const uint8_t *p, uint64_t file_size, struct fi_base_info *info,
                          struct petrel_error *err);
/* Maps and verifies the base open on `fd` and fills `v` with its records. */
bool fi_base_load(int fd, uint64_t file_size, struct fi_view *v, struct fi_base_info *info,
                  struct fi_timing *t, struct petrel_error *err);
/* Writes `v` as the new base (temporary file, fsync, rename, directory
 * fsync) with the identity fields of `info` (lineage, parent, flags).
 * Returns the new file's descriptor in *fd_out. */
bool fi_base_write(struct fileindex *fi, const struct fi_view *v, const struct fi_base_info *info,
                   int *fd_out, struct petrel_error *err);

/* ---------- fileindex-log.c ---------- */
bool fi_log_create(struct fileindex *fi, uint32_t version, uint64_t lineage, int *fd_out,
                   struct petrel_error *err);
bool fi_log_read_header(int fd, uint32_t *version, uint64_t *lineage, struct petrel_error *err);
enum fi_tail {
    FI_TAIL_CLEAN,   /* the scan ended exactly at the end of the file / limit */
    FI_TAIL_PENDING, /* bytes after the last valid transaction: torn or in progress */
    FI_TAIL_CORRUPT, /* (classify only) a valid transaction follows an invalid one */
};
/* Applies the valid transactions from `from` up to `limit` (UINT64_MAX: end
 * of file) to `v`; *end is the offset after the last one applied. With
 * `classify` (caller holds the lock) bytes after it are told apart into
 * torn tail and corruption. False (INVALID/IO) when a checksummed
 * transaction does not apply: `v` is then unusable. */
bool fi_log_replay(int fd, uint64_t from, uint64_t limit, bool classify, struct fi_view *v,
                   uint64_t *end, enum fi_tail *tail, struct fi_timing *t,
                   struct petrel_error *err);
/* Applies one transaction body (ops) to `v`. */
bool fi_log_apply(struct fi_view *v, const uint8_t *body, size_t len, struct petrel_error *err);
/* Writes the transaction `txn` (`total` bytes; the first FI_TXN_HDR_SIZE
 * are filled in here) at `off` and syncs it per policy. When the write
 * itself fails the file is cut back to `off`; when only the sync fails
 * *visible is set: the transaction is complete in the file. */
bool fi_log_write_txn(struct fileindex *fi, int fd, uint64_t off, uint8_t *txn, size_t total,
                      bool important, bool *visible, struct petrel_error *err);
/* Replaces the log by a new file holding its first `len` bytes (a new
 * inode, so every reader reloads instead of trusting what it applied). */
bool fi_log_rewrite_prefix(struct fileindex *fi, int fd, uint64_t len, int *fd_out,
                           struct petrel_error *err);

/* ---------- fileindex-cache.c ---------- */
void fi_cache_init(struct fi_cache *c);
void fi_cache_free(struct fi_cache *c);

/* ---------- fileindex.c (used by the cache) ---------- */
/* Commits a header-only transaction moving cache_reset_id (lock held). */
bool fi_set_cache_reset_id(struct fileindex *fi, uint64_t id, struct petrel_error *err);
/* The cache_reset_id in force for writes (the open transaction's). */
uint64_t fi_current_cache_reset_id(const struct fileindex *fi);
/* Brings the view up to date while the caller holds the lock. */
bool fi_refresh_locked(struct fileindex *fi, struct petrel_error *err);

#endif
