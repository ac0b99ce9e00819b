/* dovecot-uidlist, version 3 (Dovecot's format, so UIDs and UIDVALIDITY
 * survive a migration between Dovecot and Petrel):
 *     3 V<uidvalidity> N<nextuid> G<guid hex 32>[ other header fields]
 *     <uid> [<extension fields>] :<base filename>
 * Extension fields (e.g. "W1234", "S1200") before ':' are preserved. Lines are
 * in ascending UID order. Appending lines is allowed; every other change
 * rewrites the file (temporary file, fsync, rename). Version 1 files
 * ("1 <uidvalidity> <nextuid>", lines "<uid> <filename>") are read too.
 * Callers hold the folder lock while writing. */
#ifndef PETREL_STORAGE_MAILDIR_UIDLIST_H
#define PETREL_STORAGE_MAILDIR_UIDLIST_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct uidlist_entry {
    uint32_t uid;
    char *base;       /* base file name (before ":2,") */
    char *extensions; /* the raw extension fields, "" when none */
};

struct uidlist {
    uint32_t uid_validity;
    uint32_t next_uid;
    uint8_t guid[16];
    bool has_guid;
    char *extra_header; /* other header fields, preserved */
    struct uidlist_entry *entries;
    size_t count;
    size_t cap;
    /* Size of the file as read, so an append can be detected/continued. */
    uint64_t file_size;
    /* The file read (0/0 when unknown) and its format version: lines
     * appended to that same file can be read without reading it all. */
    uint64_t file_dev;
    uint64_t file_ino;
    unsigned version;
};

/* The calls that take `dir_fd` and `path` reach the file as fs_read_file_at
 * does (core/fs-util.h): AT_FDCWD and the path, or the path's last component
 * in the open directory dir_fd, the path then naming it in messages only. */
/* Reads `path`. A missing file is PETREL_ERR_NOT_FOUND. Malformed lines make
 * the read fail with "path:line: message" (PETREL_ERR_INVALID) so callers
 * can rebuild instead of trusting a damaged map. */
bool uidlist_read(int dir_fd, const char *path, struct uidlist *out, struct petrel_error *err);
/* Brings `list` (read from `path` by uidlist_read) up to date with lines
 * appended to the same file since, reading only those. False, with `list`
 * unchanged, when that is not possible (the file was replaced, shrank, is
 * version 1, or what follows is not a run of well-formed lines with higher
 * UIDs and new names): the caller reads the whole file instead. */
bool uidlist_read_appended(int dir_fd, const char *path, struct uidlist *list);
/* Parses text (tests, fuzzing). */
bool uidlist_parse(const char *name, const char *text, size_t len, struct uidlist *out,
                   struct petrel_error *err);
/* Serialises the whole file into `out` (appended); what uidlist_write
 * writes. PETREL_ERR_INVALID when the list has no GUID or holds something
 * the format cannot carry (UIDs out of order, a base with '/', ':' or a
 * newline, extension fields not starting with 'A'..'Z'). */
bool uidlist_format(const struct uidlist *list, struct buf *out, struct petrel_error *err);
/* Writes the whole list (temp + fsync + rename; directory fsynced when
 * `fsync`). A list without a GUID gets a fresh random one in the file. */
bool uidlist_write(int dir_fd, const char *path, const struct uidlist *list, bool fsync,
                   struct petrel_error *err);
/* Appends entries [from, list->count) to the existing file after checking it
 * still has the size that was read (else rewrites), and updates the
 * header's next_uid by rewriting when needed. */
bool uidlist_append(int dir_fd, const char *path, struct uidlist *list, size_t from, bool fsync,
                    struct petrel_error *err);
/* Appends entries [from, list->count) at list->file_size through `fd`, an
 * open read-write descriptor of the very file `list` describes: the caller
 * checked (under the folder lock) that the path still names it, that it has
 * list->file_size bytes and a version 3 header, and that list->next_uid
 * does not exceed the last UID + 1 (so the header need not change). */
bool uidlist_append_fd(int fd, const char *path, struct uidlist *list, size_t from, bool fsync,
                       struct petrel_error *err);
/* Adds an entry in memory (uid must exceed every existing uid). */
void uidlist_add(struct uidlist *list, uint32_t uid, const char *base, const char *extensions);
/* Binary search by uid / linear by base name; NULL when absent. */
const struct uidlist_entry *uidlist_find_uid(const struct uidlist *list, uint32_t uid);
const struct uidlist_entry *uidlist_find_base(const struct uidlist *list, const char *base);
void uidlist_free(struct uidlist *list);

#endif
