/* fileindex: Petrel's per-folder index, storage-driver independent.
 *
 * Files in the folder's index directory:
 *   petrel.index        base: header + fixed-size records + string table
 *   petrel.index.log    overlay: append-only transactions since the base
 *   petrel.index.cache  cache: per-message cached fields, one generation
 *   petrel.index.lock   the folder lock (flock), shared with the storage
 *                       driver for everything it writes in the folder
 *
 * Header: folder GUID (16 bytes, stamped at creation, kept across rename),
 * uid_validity, next_uid, highest_modseq, cache_reset_id, lineage.
 * Record: uid, flags, keywords, modseq, size, vsize, internal date, file name.
 *
 * Crash safety: the base is only ever replaced (temp file, fsync, rename,
 * directory fsync); log transactions are appended with a length and a
 * checksum and fsynced per commit (policy `mail_fsync`). On open, a torn log
 * tail is cut; a corrupt or missing base or log makes open fail with
 * PETREL_ERR_INVALID so the storage driver rebuilds from the messages.
 *
 * Concurrency: writers take the folder lock exclusively (fileindex_begin).
 * Readers never lock when they can prove their view is fresh: the base's
 * lineage (random 64-bit id stamped when a base is written) plus the log
 * position they have applied; when the log only grew they apply the new
 * records ("incremental"), when the base changed they reload it, and when
 * freshness cannot be proven (no lineage yet: an index written by an older
 * version) they reload under a shared lock ("reload-fallback").
 *
 * Metrics (document 2): petrel_fileindex_read_seconds,
 * petrel_fileindex_read_part_seconds{part=lock|reload|build},
 * petrel_fileindex_lock_acquired_total{mode,site}, ..._lock_wait_seconds{mode,site},
 * ..._lock_release_seconds{mode,site} (time held), ..._lock_reentrant_total{mode,site},
 * petrel_fileindex_reload_total{result=none|incremental|full|adopt|fallback|error},
 * petrel_fileindex_lineage_stamped_total. Sites: open-probe, reload-fallback, read, write.
 *
 * Ownership: struct fileindex belongs to its opener (one per process and
 * folder is the expected use); records returned stay valid until the next
 * refresh or commit on that handle. Not thread-safe. */
#ifndef PETREL_STORAGE_FILEINDEX_H
#define PETREL_STORAGE_FILEINDEX_H

#include "core/error.h"
#include "core/metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fileindex;
struct fileindex_txn;

/* Record flags belong to the storage above (storage/mail-flags.h); the
 * index stores them as given and knows one bit only: the one whose absence
 * it counts for the unseen figure (the storage's \Seen, which the storage
 * asserts is this value). */
#define FILEINDEX_SEEN_BIT 0x01u

enum fileindex_fsync { FILEINDEX_FSYNC_ALWAYS, FILEINDEX_FSYNC_OPTIMIZED, FILEINDEX_FSYNC_NEVER };

struct fileindex_settings {
    enum fileindex_fsync fsync;
    struct metrics_registry *metrics; /* may be NULL */
    /* The log is folded into the base automatically when it exceeds this
     * many bytes (0 = default 1 MiB); optimize does it on demand. */
    uint64_t log_fold_bytes;
};

struct fileindex_header {
    uint8_t guid[16];
    uint32_t uid_validity;
    uint32_t next_uid;
    uint64_t highest_modseq;
    uint64_t cache_reset_id;
    uint64_t lineage;
};

struct fileindex_record {
    uint32_t uid;
    uint32_t flags;    /* the storage's bits, opaque here but for FILEINDEX_SEEN_BIT */
    uint32_t keywords; /* bit i = keyword i of the folder */
    uint64_t modseq;
    uint64_t size;  /* physical bytes */
    uint64_t vsize; /* bytes with CRLF line endings */
    int64_t internal_date;
    const char *filename; /* the driver's name for the message (maildir: base name) */
};

/* Creates a new empty index in `dir` with the given identity (fails with
 * PETREL_ERR_EXISTS when one exists). next_uid starts at 1, modseq at 1. */
bool fileindex_create(const char *dir, const uint8_t guid[16], uint32_t uid_validity,
                      const struct fileindex_settings *set, struct petrel_error *err);
/* Opens an existing index: PETREL_ERR_NOT_FOUND when absent, PETREL_ERR_INVALID
 * when damaged beyond a torn log tail (rebuild it), PETREL_ERR_IO otherwise. */
struct fileindex *fileindex_open(const char *dir, const struct fileindex_settings *set,
                                 struct petrel_error *err);
/* fileindex_open on the directory open as dir_fd (duplicated; the caller
 * keeps its own), `dir` naming it in messages: the index is then of the
 * very directory the caller holds, whatever its path names meanwhile. */
struct fileindex *fileindex_open_in(const char *dir, int dir_fd,
                                    const struct fileindex_settings *set, struct petrel_error *err);
void fileindex_close(struct fileindex *fi);

/* Brings the view up to date (see Concurrency above). */
bool fileindex_refresh(struct fileindex *fi, struct petrel_error *err);
/* Whether the log this handle reads holds more than it applied (one fstat
 * of the open log; true when that fails or the handle must reload). Says
 * nothing about the base being replaced: that is a rename in the folder. */
bool fileindex_log_grown(struct fileindex *fi);
/* Counts the refreshes (of any caller, inside transactions too) that took
 * in other writers' changes or failed: unchanged, the handle holds nothing
 * but what it read at the earlier value and its own commits since. */
uint64_t fileindex_foreign_changes(const struct fileindex *fi);
const struct fileindex_header *fileindex_get_header(const struct fileindex *fi);
size_t fileindex_count(const struct fileindex *fi);
/* Heap bytes held by the handle's view (records array + name arena): what
 * keeping the handle open costs per message (callers that keep handles
 * under a byte budget; the benchmark's "memory per message"). O(1). */
size_t fileindex_memory_bytes(const struct fileindex *fi);
/* Records in ascending UID order: i in [0, count). */
const struct fileindex_record *fileindex_record_at(const struct fileindex *fi, size_t i);
const struct fileindex_record *fileindex_lookup_uid(const struct fileindex *fi, uint32_t uid);
/* Number of records without FILEINDEX_SEEN_BIT. */
size_t fileindex_unseen(const struct fileindex *fi);

/* True when this handle found the index log not writable (a read-only
 * folder): only fileindex_begin_sync() can change its view then. */
bool fileindex_read_only(const struct fileindex *fi);
/* Starts a write: takes the folder lock exclusively (waiting up to 30 s) and
 * refreshes. Only one transaction per handle at a time. */
struct fileindex_txn *fileindex_begin(struct fileindex *fi, struct petrel_error *err);
/* As fileindex_begin() for a transaction that brings the index in line
 * with the folder's files (a sync): when the index log may not be written
 * (a read-only folder), the transaction is still granted, *in_memory is
 * set, and its commit changes only this handle's view (nothing is
 * written; replace_all is refused). */
struct fileindex_txn *fileindex_begin_sync(struct fileindex *fi, bool *in_memory,
                                           struct petrel_error *err);
/* Appends a message. uid 0 assigns next_uid; a given uid must be >= next_uid
 * (rebuild keeping UIDs). Returns the UID. The record's modseq is set by the
 * index. */
uint32_t fileindex_txn_append(struct fileindex_txn *txn, const struct fileindex_record *rec);
/* Replaces flags/keywords of `uid` (bumps its modseq); false when unknown. */
bool fileindex_txn_set_flags(struct fileindex_txn *txn, uint32_t uid, uint32_t flags,
                             uint32_t keywords);
bool fileindex_txn_set_filename(struct fileindex_txn *txn, uint32_t uid, const char *filename);
bool fileindex_txn_expunge(struct fileindex_txn *txn, uint32_t uid);
/* Raises next_uid (never lowers it). */
void fileindex_txn_set_next_uid(struct fileindex_txn *txn, uint32_t next_uid);
/* Stores a cache reset id in the header (cache purge). */
void fileindex_txn_set_cache_reset_id(struct fileindex_txn *txn, uint64_t id);
/* The folder lock is held while the transaction is open: the storage driver
 * does its own file work (uidlist, renames) inside it. */
bool fileindex_txn_commit(struct fileindex_txn *txn, struct petrel_error *err);
void fileindex_txn_rollback(struct fileindex_txn *txn);
/* Runs fn(arg) when the transaction commits successfully, after the commit
 * and before the folder lock is released, so that what the driver writes
 * about the committed state (maildir's sync stamp) is in place before the
 * next writer looks. Not run on failure or rollback. One per transaction. */
void fileindex_txn_on_commit(struct fileindex_txn *txn, void (*fn)(void *arg), void *arg);

/* Replaces the whole index with `records` (ascending UIDs) and `header`
 * (rebuild). Runs inside a transaction: call between begin and commit/rollback. */
bool fileindex_txn_replace_all(struct fileindex_txn *txn, const struct fileindex_header *header,
                               const struct fileindex_record *records, size_t count,
                               struct petrel_error *err);

/* Folds the log into a new base (no change to records, UIDs or modseqs);
 * a fast no-op when the log holds only its header. */
bool fileindex_optimize(struct fileindex *fi, struct petrel_error *err);

/* ---------- usage (quota) ---------- */

/* The folder's aggregate: live messages and the sum of their physical
 * sizes. It is kept in the same commit as the records that change it (a
 * TOTALS operation in every log transaction, the sum in the base header), so
 * no crash can leave the two apart; the storage's quota usage is a sum of
 * these over folders, never a scan of messages. */
struct fileindex_usage {
    uint64_t messages;
    uint64_t bytes;
};
/* The aggregate of the handle's view (as of its last refresh). O(1). */
void fileindex_get_usage(const struct fileindex *fi, struct fileindex_usage *out);
/* How fileindex_read_usage() found the aggregate. */
enum fileindex_usage_source {
    FILEINDEX_USAGE_TAIL,    /* base header and the log's last transaction: O(1) */
    FILEINDEX_USAGE_LOG,     /* base header and the whole log (bounded by the fold size) */
    FILEINDEX_USAGE_RECORDS, /* the index opened read-only and its records summed */
};
/* The aggregate of the index in `dir` without loading its records and
 * without the lock: the base header and the log's last transaction, which
 * carries the aggregate after it with a trailer that lets it be verified
 * from the end of the file (a few hundred bytes read, whatever the log's
 * length). When the tail does not verify (a torn or unfinished last
 * transaction, a log written by an older version) the whole log's
 * aggregates are read; when the files do not carry it at all (an index
 * written before the aggregate existed, a base and log caught between a
 * writer's two renames three times running) it opens the index read-only
 * and sums the records. *how (may be NULL) tells which. Writes nothing.
 * Errors as fileindex_open (NOT_FOUND when there is no index). */
bool fileindex_read_usage(const char *dir, const struct fileindex_settings *set,
                          struct fileindex_usage *out, enum fileindex_usage_source *how,
                          struct petrel_error *err);
/* A cache of folder aggregates for a reader that asks often (quota-status
 * on every RCPT): an entry answers as long as the index's base and log
 * files are the very files it was read from, unchanged (device, inode,
 * size, modification and change times, by stat). Bases are only ever
 * replaced by rename and a log read to a clean end only grows or is
 * replaced, so every commit, fold or rebuild is seen by the next call; a
 * log with an unfinished tail is not cached. At most `max_entries` folders
 * (it is emptied when full). Not thread-safe: one per thread. */
struct fileindex_usage_cache;
struct fileindex_usage_cache *fileindex_usage_cache_new(size_t max_entries);
void fileindex_usage_cache_free(struct fileindex_usage_cache *cache);
/* Answers served from the cache without reading the index. */
uint64_t fileindex_usage_cache_hits(const struct fileindex_usage_cache *cache);
/* fileindex_read_usage() through `cache` (NULL: no cache). */
bool fileindex_read_usage_cached(struct fileindex_usage_cache *cache, const char *dir,
                                 const struct fileindex_settings *set, struct fileindex_usage *out,
                                 struct petrel_error *err);
/* Recomputes the aggregate from the records' sizes under the folder lock
 * and writes it (one transaction), for an aggregate suspected wrong; *out
 * (may be NULL) gets it. The index heals itself anyway: a base or USAGE
 * that disagrees with the records is rewritten by the next transaction. */
bool fileindex_usage_recalc(struct fileindex *fi, struct fileindex_usage *out,
                            struct petrel_error *err);

/* ---------- cache ---------- */

/* A cached field of a message (field names are short ASCII words chosen by
 * callers, e.g. "envelope", "bodystructure"). NULL when absent, when the
 * cache file's generation differs from the header's cache_reset_id (cache
 * treated as absent), or when the cache is unreadable (then dropped and the
 * generation advanced). The data stays valid until the next cache call.
 * Fields other handles add become visible at this handle's next
 * fileindex_refresh() (the cache file is looked at once per refresh);
 * this handle's own adds at once. */
const void *fileindex_cache_get(struct fileindex *fi, uint32_t uid, const char *field, size_t *len);
/* Adds a field (append to the cache file under the folder lock). A cache
 * that reached its offset ceiling (4 GiB) stops caching until purged. */
bool fileindex_cache_add(struct fileindex *fi, uint32_t uid, const char *field, const void *data,
                         size_t len, struct petrel_error *err);
/* Like fileindex_cache_add, but the field is only queued in this handle
 * (its own lookups see it at once) and written by fileindex_cache_flush
 * with every other queued field under one lock and in one write; the queue
 * also flushes itself past 256 fields or 1 MiB. Queued fields are
 * dropped, not written, when the index's cache_reset_id moved meanwhile,
 * and are lost with the handle unless flushed. */
bool fileindex_cache_queue(struct fileindex *fi, uint32_t uid, const char *field, const void *data,
                           size_t len, struct petrel_error *err);
/* Writes the queued fields (a no-op when none are queued). On failure the
 * queue is dropped (nothing else is lost: the cache is an optimisation). */
bool fileindex_cache_flush(struct fileindex *fi, struct petrel_error *err);

struct fileindex_purge_stats {
    uint64_t carried;         /* records moved to the new generation */
    uint64_t reclaimed_bytes; /* old size - new size */
};
/* Rewrites the cache as a new generation holding only records of live
 * messages, then moves the header's cache_reset_id to it in one index
 * write. Interrupted at any point, the cache reads as absent, never wrong. */
bool fileindex_cache_purge(struct fileindex *fi, struct fileindex_purge_stats *stats,
                           struct petrel_error *err);

#endif
