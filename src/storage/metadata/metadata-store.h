/* METADATA entries in the dict named by mail.attribute_dict (RFC 5464),
 * laid out as metadata-entry.h says (Dovecot's mail_attribute_dict keys).
 *
 * Threads and loops: a dict handle belongs to the event loop it was opened
 * on. Each storage handle has its own: the process's main storage uses the
 * registry's dict (opened on the main loop, which runs the operator API);
 * a sibling made for another loop (an IMAP worker) is given that loop with
 * metadata_storage_bind_loop() (on the main thread, at start-up) and opens
 * its own instance of the same dict (dict_instance_new) on first use, on
 * that loop's thread. No operation
 * ever crosses threads, and none blocks a loop: every call below completes
 * through a callback from the handle's loop (at once for the file and
 * SQLite drivers, later for PostgreSQL and Redis). Callbacks are always
 * called exactly once; a caller that goes away meanwhile must keep `ctx`
 * alive or make it ignore the answer (see imap-cmd-metadata.c).
 *
 * Writes: a set or delete of any number of entries is one dict
 * transaction (all or nothing), and nothing is cached, so a write through
 * one handle is seen by the next read through any other (the API's write
 * by the next IMAP command of a live session). */
#ifndef PETREL_STORAGE_METADATA_METADATA_STORE_H
#define PETREL_STORAGE_METADATA_METADATA_STORE_H

#include "core/error.h"
#include "storage/mail-storage-module.h"
#include "storage/mail-storage.h"
#include "storage/metadata/metadata-entry.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct dict;
struct dict_iterate;
struct dict_op_settings;

/* ---------- the dict of a storage handle ---------- */

/* Names the dict of mail.attribute_dict (from the configuration's
 * registry, opened later on the main loop) for the process's main storage,
 * before any sibling is made; siblings inherit it. */
void metadata_storage_set_dict(struct mail_storage *storage, struct dict *dict);
/* The sibling `storage` runs on `base` (not the main loop): its dict is an
 * instance of its own, made here (call it on the main thread while the
 * configuration's registry exists) and opened on first use. */
void metadata_storage_bind_loop(struct mail_storage *storage, struct event_base *base);
/* The dict for this handle's loop; NULL with UNSUPPORTED when METADATA is
 * not configured, UNAVAILABLE when the instance cannot be opened or the
 * handle belongs to no loop (a delivery thread). Call on the handle's own
 * thread. */
struct dict *metadata_storage_dict(struct mail_storage *storage, struct petrel_error *err);
/* Frees the handle's own instance (mail_storage_free calls it). */
void metadata_storage_free(struct mail_storage *storage);

/* The limits of mail.metadata_max_value_bytes / metadata_max_entries. */
uint64_t metadata_max_value(const struct mail_storage *storage);
uint64_t metadata_max_entries(const struct mail_storage *storage);

/* ---------- where entries live ---------- */

struct metadata_target {
    char username[256]; /* whose /private entries: the owner, or as_user */
    char guid[33];      /* the folder's GUID, or the INBOX's for the server */
    bool server;
    /* the server's /shared/admin from mail.metadata_server_admin (NULL:
     * an ordinary entry); read-only, as Dovecot's mail_server_admin */
    const char *server_admin;
};

/* What a caller is about to do with a folder's entries (bits), for
 * metadata_access_check(). NONE checks nothing (the folder's own deletion
 * purging its entries). */
enum metadata_access {
    METADATA_ACCESS_NONE = 0,
    METADATA_READ_PRIVATE = 1u << 0,
    METADATA_READ_SHARED = 1u << 1,
    METADATA_WRITE_PRIVATE = 1u << 2,
    METADATA_WRITE_SHARED = 1u << 3,
};

/* The bit for reading (`write` false) or writing entries of `scope`. */
unsigned metadata_access_for(enum metadata_scope scope, bool write);

/* The one rule for who may touch a folder's entries, for every front end
 * (RFC 5464 3.3 with the folder's RFC 4314 rights, mail_folder_my_rights):
 * a folder without "l" answers NOT_FOUND, as a missing one; "l" without
 * any of "r", "s", "w", "i", "p" is PERMISSION for either scope; reading
 * /shared entries needs "r" and writing them "w" (PERMISSION). Without
 * ACLs a session reaches the entries of its personal namespace's folders
 * only (PERMISSION elsewhere). The server's entries (`name` NULL or "")
 * are each user's own and always reachable (RFC 5464 3.3). The admin
 * plane's users (not sessions) pass every check (document 1). */
bool metadata_access_check(struct mail_user *user, const struct namespace_config *ns,
                           const char *name, unsigned access, struct petrel_error *err);

/* Resolves folder `name` of `ns` (NULL or "": the server, kept on the
 * user's INBOX) to its GUID as its index holds it, after
 * metadata_access_check(`access`). NOT_FOUND when the folder does not
 * exist; a folder whose index has no GUID is an I/O error. `private_user`
 * NULL means the user itself. */
bool metadata_target_resolve(struct mail_user *user, const struct namespace_config *ns,
                             const char *name, const char *private_user, unsigned access,
                             struct metadata_target *t, struct petrel_error *err);

/* ---------- reading ---------- */

struct metadata_value {
    struct metadata_entry entry;
    char *value; /* NUL-terminated after len bytes */
    size_t len;
};

/* One answer of metadata_read: `values` in the order of the bases asked,
 * each base's entries in key order; ok false with `error` on a dict
 * failure. Valid only during the callback. */
struct metadata_read_result {
    bool ok;
    const char *error;
    const struct metadata_value *values;
    size_t count;
};
typedef void metadata_read_cb(const struct metadata_read_result *r, void *ctx);

/* Reads the entries named by `bases` (count of them) with DEPTH `depth`
 * (0, 1, -1 infinity): each base itself when it has a value, and its
 * descendants down to the depth. Internal entries are never returned. The
 * configured server /shared/admin (t->server_admin) replaces the dict's
 * (and comes last). Every value is held until the callback: for the
 * operator API, whose bodies are bounded; IMAP streams with
 * metadata_read_start() below. */
void metadata_read(struct dict *dict, const struct metadata_target *t,
                   const struct metadata_entry *bases, size_t count, int depth,
                   metadata_read_cb *cb, void *ctx);

/* Reads the same entries as metadata_read, in the same order, one at a
 * time: `row_cb` gets each (the value is `len` bytes, not NUL-terminated,
 * valid only during the call) and answers MORE, or PAUSE to stop taking
 * rows until metadata_reader_resume(); `end_cb` is called once at the end
 * (ok false with `error` on a dict failure, possibly after some rows),
 * after which the reader is gone. Returns the reader, or NULL when it
 * already ended inside this call. A paused reader holds no row: only the
 * dict's cursor (the SQLite and PostgreSQL drivers keep a connection for
 * it, the Redis driver a sorted result). */
enum metadata_row_action { METADATA_ROW_MORE, METADATA_ROW_PAUSE };
typedef enum metadata_row_action metadata_row_cb(const struct metadata_entry *e, const char *value,
                                                 size_t len, void *ctx);
typedef void metadata_end_cb(bool ok, const char *error, void *ctx);
struct metadata_reader;
struct metadata_reader *metadata_read_start(struct dict *dict, const struct metadata_target *t,
                                            const struct metadata_entry *bases, size_t count,
                                            int depth, metadata_row_cb *row_cb,
                                            metadata_end_cb *end_cb, void *ctx);
/* Takes rows again after a PAUSE (callbacks may come inside the call). */
void metadata_reader_resume(struct metadata_reader *r);
/* Ends a reader that has not ended (NULL: nothing): no callback comes
 * after this. Not from inside its own callbacks. */
void metadata_reader_abort(struct metadata_reader *r);

/* ---------- writing ---------- */

struct metadata_change {
    struct metadata_entry entry;
    const char *value; /* NULL: delete the entry */
    size_t len;
};

enum metadata_write_status {
    METADATA_WRITE_OK,
    METADATA_WRITE_TOOMANY, /* more entries than metadata_max_entries would exist */
    METADATA_WRITE_READONLY, /* the configured server /shared/admin */
    METADATA_WRITE_FAILED,  /* dict failure: `error` says why */
};
typedef void metadata_write_cb(enum metadata_write_status status, const char *error, void *ctx);

/* Applies `changes` as one dict transaction (READONLY, nothing written,
 * when one is the configured server /shared/admin). The caller has checked the
 * names and the value sizes; here, when any change sets an entry that does
 * not exist yet, the folder's entries (both scopes, `t`'s private ones)
 * are counted first and the write refused with TOOMANY when the result
 * would exceed `max_entries` (0: no limit). */
void metadata_write(struct dict *dict, const struct metadata_target *t,
                    const struct metadata_change *changes, size_t count, uint64_t max_entries,
                    metadata_write_cb *cb, void *ctx);

/* ---------- the storage module ---------- */

/* Deleting a folder deletes its entries (its shared ones and the deleting
 * user's private ones; other users' private entries of a shared folder
 * cannot be enumerated in a dict and stay, unreachable, under the GUID no
 * new folder gets). Renaming needs nothing: keys follow the GUID. */
extern const struct mail_storage_module metadata_module;

/* Starts listing, recursively and without values, the keys under the
 * `scope` prefix of the folder (or, `server`, the server) with GUID
 * `guid_hex` (metadata_dict_prefix()); `ready` runs when an asynchronous
 * dict has more rows. NULL, with `err` set, if the dict cannot list. */
struct dict_iterate *metadata_iterate_keys(struct dict *dict, const struct dict_op_settings *set,
                                           enum metadata_scope scope, const char *guid_hex,
                                           bool server, void (*ready)(void *ctx), void *ctx,
                                           struct petrel_error *err);

#endif
