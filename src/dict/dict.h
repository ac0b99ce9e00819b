/* Key-value dicts (Dovecot's dict conventions): named instances configured
 * under `dicts:`, each backed by one driver (memory, file, sql, kvstore,
 * fail). Keys start with "shared/" (visible to everyone) or "priv/" (belongs
 * to the user named in the operation settings; stored per user). Values are
 * byte strings.
 *
 * The API is asynchronous-friendly: every operation completes through a
 * callback, which synchronous drivers call before returning and network
 * drivers (PostgreSQL, Redis) call from the event loop later. Iteration is
 * a pull interface with backpressure: the consumer asks for rows when it can
 * write them, so a result of any size streams in constant memory.
 *
 * Ownership: struct dict belongs to its registry; transactions and
 * iterators belong to the caller until commit / deinit. Strings passed in
 * are copied when an operation needs them after returning. Strings handed to
 * callbacks are valid only during the callback. */
#ifndef PETREL_DICT_H
#define PETREL_DICT_H

#include "core/error.h"
#include "core/metrics.h"
#include "core/yaml-doc.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dict;
struct dict_registry;
struct dict_transaction;
struct dict_iterate;

/* OpSettings of the API: all optional. */
struct dict_op_settings {
    const char *username;
    const char *home_dir;
    int64_t expire_secs; /* 0 = no expiry; applies to sets in the operation */
};

/* CommitResult of the API. */
enum dict_commit_result {
    DICT_COMMIT_OK = 1,
    DICT_COMMIT_NOT_FOUND = 0,
    DICT_COMMIT_FAILED = -1,
    DICT_COMMIT_WRITE_UNCERTAIN = -2,
};

/* Iterate flags of the API (bit values are the wire values). */
enum dict_iter_flags {
    DICT_ITER_RECURSE = 1,
    DICT_ITER_SORT_BY_KEY = 2,
    DICT_ITER_SORT_BY_VALUE = 4,
    DICT_ITER_NO_VALUE = 8,
    DICT_ITER_EXACT_KEY = 16,
};
#define DICT_ITER_ALL_FLAGS 31

struct dict_value {
    const char *data;
    size_t len;
};

/* ---------- settings (configuration) and registry (the daemon's) ---------- */

/* The `dicts:` section as read: for each dict its name, driver and driver
 * options, nothing opened. The configuration owns it; the daemon makes its
 * registry from it (dict_registry_new). */
struct dict_settings;

/* Reads the `dicts:` section: a map name -> {driver: ..., driver options}.
 * Unknown drivers and bad options fail with `file:line: message`. */
struct dict_settings *dict_settings_read(const char *file, const struct ynode *section,
                                         struct petrel_error *err);
size_t dict_settings_count(const struct dict_settings *s);
/* Name and driver of the i-th dict (for --check-config and checks of
 * other sections that name dicts). */
const char *dict_settings_name(const struct dict_settings *s, size_t i);
const char *dict_settings_driver(const struct dict_settings *s, size_t i);
/* Whether a dict of that name is configured. */
bool dict_settings_has(const struct dict_settings *s, const char *name);
void dict_settings_free(struct dict_settings *s);

/* The dicts the daemon serves, one per configured dict. They share the
 * settings' driver options (by reference), so the registry may outlive
 * the settings and the settings the registry. */
struct dict_registry *dict_registry_new(const struct dict_settings *s);
/* Opens every configured dict on `base` (connects network drivers lazily:
 * a dict whose server is down still opens and fails its operations). */
bool dict_registry_open(struct dict_registry *reg, struct event_base *base,
                        struct metrics_registry *metrics, struct petrel_error *err);
/* The configured dict of that name, or NULL. */
struct dict *dict_registry_get(struct dict_registry *reg, const char *name);
size_t dict_registry_count(const struct dict_registry *reg);
/* Marks every dict closing (operations then fail with "unavailable"), then
 * frees once in-flight operations have completed or been cancelled. */
void dict_registry_close(struct dict_registry *reg);
void dict_registry_free(struct dict_registry *reg);

/* Another instance of `proto` (a dict of a registry, opened or not), for
 * a thread with a loop of its own (an IMAP worker) so that no dict handle
 * crosses threads: same driver and options, its own state and connections.
 * It takes a reference on the configuration, so it may outlive the registry
 * (a worker stopping after the registry was freed); make it while the
 * registry exists (at start-up) and start it on its loop's thread. No
 * metrics are registered for it (the registry's dict has them). Instances
 * of the file, sql and kvstore drivers see each other's writes as separate
 * processes do; a memory dict's instance is an empty map of its own. */
struct dict *dict_instance_new(const struct dict *proto);
/* Opens the instance on `base` (idempotent once it succeeded). False with
 * err when the driver cannot open; it may be tried again. */
bool dict_instance_start(struct dict *dict, struct event_base *base, struct petrel_error *err);
/* Closes an instance (pending callbacks are answered with an error) and
 * frees it; NULL is ignored. */
void dict_instance_free(struct dict *dict);

/* The registered drivers, in name order. */
size_t dict_driver_count(void);
const char *dict_driver_name_at(size_t i);

const char *dict_name(const struct dict *dict);
const char *dict_driver_name(const struct dict *dict);
/* True while the dict accepts operations (false once closing). */
bool dict_is_open(const struct dict *dict);
/* True for drivers whose lookups may return more than one value. */
bool dict_is_multi_value(const struct dict *dict);

/* ---------- key validation ---------- */

/* Checks a key (or iterate path when `is_path`) against the settings:
 * prefix priv/ or shared/, priv/ needs a username, no NUL/control bytes,
 * length <= 4096. Message suitable for a 400 reply. */
bool dict_key_validate(const char *key, const struct dict_op_settings *set, bool is_path,
                       struct petrel_error *err);

/* ---------- lookup ---------- */

struct dict_lookup_result {
    int ret; /* 1 found, 0 not found, -1 error */
    const char *error;
    const struct dict_value *values;
    size_t value_count;
};
typedef void dict_lookup_cb(const struct dict_lookup_result *result, void *ctx);

/* Validates the key (error -> ret -1 with the message, err code INVALID
 * reported through `invalid`) and looks it up. */
void dict_lookup(struct dict *dict, const struct dict_op_settings *set, const char *key,
                 dict_lookup_cb *cb, void *ctx);

/* ---------- iterate ---------- */

enum dict_iter_status {
    DICT_ITER_ROW,   /* *row is filled */
    DICT_ITER_WAIT,  /* no row yet: the async callback fires when there is */
    DICT_ITER_DONE,  /* finished successfully */
    DICT_ITER_ERROR, /* failed; dict_iterate_error() says why */
};

struct dict_row {
    const char *key; /* as the caller addresses it (priv/... without the user) */
    const struct dict_value *values;
    size_t value_count; /* 0 with DICT_ITER_NO_VALUE */
};

/* Starts iterating keys under `path` (a key prefix; with EXACT_KEY the key
 * itself). Returns NULL with err for an invalid path or flags. */
struct dict_iterate *dict_iterate_init(struct dict *dict, const struct dict_op_settings *set,
                                       const char *path, unsigned flags, struct petrel_error *err);
/* The row stays valid until the next call. */
enum dict_iter_status dict_iterate_next(struct dict_iterate *it, struct dict_row *row);
/* Called (once per WAIT) when dict_iterate_next may make progress again. */
void dict_iterate_set_async_callback(struct dict_iterate *it, void (*cb)(void *ctx), void *ctx);
const char *dict_iterate_error(const struct dict_iterate *it);
/* Ends the iteration (also mid-way) and frees it. */
void dict_iterate_deinit(struct dict_iterate *it);

/* ---------- transactions ---------- */

struct dict_transaction *dict_transaction_begin(struct dict *dict,
                                                const struct dict_op_settings *set);
/* Makes the priv/ keys queued from now on belong to `username` (one
 * transaction over several users' keys: the quota mirror's batch). */
void dict_transaction_set_user(struct dict_transaction *tx, const char *username);
/* Queue operations; invalid keys are remembered and fail the commit. */
void dict_set(struct dict_transaction *tx, const char *key, const void *value, size_t len);
void dict_unset(struct dict_transaction *tx, const char *key);
void dict_atomic_inc(struct dict_transaction *tx, const char *key, int64_t delta);
/* An invalid queued key makes the whole commit fail before the driver runs. */
bool dict_transaction_valid(const struct dict_transaction *tx, struct petrel_error *err);

typedef void dict_commit_cb(enum dict_commit_result result, const char *error, void *ctx);
/* Applies every queued operation atomically (all or nothing) and frees the
 * transaction. atomic-inc of a missing key changes nothing for that key and
 * makes the result NOT_FOUND; the batch's other operations are applied. */
void dict_transaction_commit(struct dict_transaction *tx, dict_commit_cb *cb, void *ctx);
void dict_transaction_rollback(struct dict_transaction *tx);

/* ---------- expiry ---------- */

typedef void dict_expire_cb(bool ok, const char *error, void *ctx);
/* Removes expired keys now (drivers with native TTL need nothing and
 * answer ok at once). */
void dict_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx);

#endif
