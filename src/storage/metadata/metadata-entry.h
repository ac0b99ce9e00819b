/* RFC 5464 METADATA entry names and where their values live in a dict.
 *
 * An entry is "/private/<path>" or "/shared/<path>"; the path is
 * slash-separated, case-insensitive (kept in lower case, as Dovecot does),
 * printable ASCII (0x20-0x7e) without '*' or '%', with no empty component
 * and no trailing '/'. The bare scope ("/private") names no entry but is a
 * valid starting point of GETMETADATA with DEPTH.
 *
 * Dict keys follow Dovecot's mail_attribute_dict layout, so that a dict
 * written by either server is read by the other: a folder's entry
 * "/private/x" is "priv/<folder GUID>/x" (the dict stores priv/ keys per
 * user), "/shared/x" is "shared/<folder GUID>/x"; a server entry (folder
 * "") is kept on INBOX under "vendor/vendor.dovecot/pvt/server/", e.g.
 * "shared/<INBOX GUID>/vendor/vendor.dovecot/pvt/server/comment". Paths
 * under "vendor/vendor.dovecot/pvt/" are Dovecot's internal ones: no
 * client reads or writes them. */
#ifndef PETREL_STORAGE_METADATA_METADATA_ENTRY_H
#define PETREL_STORAGE_METADATA_METADATA_ENTRY_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>

/* Longest entry name accepted, "/private/" or "/shared/" included. */
#define METADATA_ENTRY_MAX 1024

enum metadata_scope {
    METADATA_PRIVATE,
    METADATA_SHARED,
};

struct metadata_entry {
    enum metadata_scope scope;
    /* The path below the scope, lower case; "" for the bare scope. */
    char path[METADATA_ENTRY_MAX + 1];
};

/* Parses an entry name. `bare_ok`: the bare scope is accepted (GETMETADATA
 * starting points); otherwise an entry must have a path. False with a
 * message for the client on anything else. */
bool metadata_entry_parse(const char *text, size_t len, bool bare_ok, struct metadata_entry *e,
                          const char **why);

/* Appends the entry's name ("/shared/comment"). */
void metadata_entry_format(const struct metadata_entry *e, struct buf *out);

/* Whether the entry is one of Dovecot's internal ones. */
bool metadata_entry_internal(const struct metadata_entry *e);

/* Appends the dict key of the entry: of the folder with GUID `guid_hex`
 * (32 hex digits), or, when `server`, the server entry kept on the INBOX
 * with that GUID. */
void metadata_dict_key(const struct metadata_entry *e, const char *guid_hex, bool server,
                       struct buf *out);

/* Appends the dict key prefix under which every entry of that scope of the
 * folder (or server) lives, ending in '/'; iterate it recursively to list
 * them. */
void metadata_dict_prefix(enum metadata_scope scope, const char *guid_hex, bool server,
                          struct buf *out);

/* Turns a dict key found under metadata_dict_prefix(scope, ...) back into
 * its entry. False for a key that is no client-visible entry (another
 * prefix, an internal path, an invalid name left by another program). */
bool metadata_entry_from_key(const char *key, enum metadata_scope scope, const char *guid_hex,
                             bool server, struct metadata_entry *e);

/* Whether `e` is returned for a GETMETADATA of `base` with DEPTH `depth`
 * (0: the entry itself, 1: it and its children, -1: infinity). */
bool metadata_entry_in_depth(const struct metadata_entry *base, const struct metadata_entry *e,
                             int depth);

#endif
