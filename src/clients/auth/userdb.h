/* One user's database record as every component sees it: the userdb fields
 * of document 1's Userdb block, plus the stored password when it came from
 * a passdb. Owned by whoever holds the pointer; free with userdb_entry_free. */
#ifndef PETREL_CLIENTS_AUTH_USERDB_H
#define PETREL_CLIENTS_AUTH_USERDB_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define USERDB_MAX_LIST 64  /* groups, quota rules, allow_nets per user */
#define USERDB_MAX_EXTRA 64 /* extra fields per user */
#define USERDB_MAX_FIELD 4096

struct userdb_extra {
    char *key;
    char *value;
};

struct userdb_entry {
    char *username;
    char *password; /* "{SCHEME}hash" or a bare hash; NULL for userdb-only lookups */
    int64_t uid;    /* -1 when not set */
    int64_t gid;    /* -1 when not set */
    char *home;          /* "" when not set */
    char *mail_location; /* "" when not set */
    char **groups;       /* NULL-terminated, never NULL */
    char **quota_rule;   /* NULL-terminated, never NULL */
    char **allow_nets;   /* NULL-terminated, never NULL; validated CIDRs */
    struct userdb_extra *extra;
    size_t extra_count;
};

/* An entry for `username` with every field unset. */
struct userdb_entry *userdb_entry_new(const char *username);
void userdb_entry_free(struct userdb_entry *e);
struct userdb_entry *userdb_entry_clone(const struct userdb_entry *e);

/* Sets one field by its name, the way passwd-file extra fields and SQL
 * result columns name them: uid, gid, home, mail (or mail_location),
 * groups (comma list; acl_groups too), quota_rule, quota_rule2..N,
 * allow_nets (comma list of CIDRs), `userdb_` prefixed names of any of
 * these; anything else becomes an extra field. False with a message in
 * *error (allocated) for a bad uid/gid, a bad CIDR or a list over its cap. */
bool userdb_entry_set(struct userdb_entry *e, const char *name, const char *value, char **error);
/* How the userdb readers fail: sets *error (when `error` is not NULL) to
 * the formatted reason, a fresh string, and returns false. */
bool userdb_fail(char **error, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The entry's NULL-terminated string lists (groups, quota rules,
 * networks): their length, whether `s` is in one, and appending `s`
 * (taken: the list frees it). */
size_t userdb_list_count(char *const *list);
bool userdb_list_contains(char *const *list, const char *s);
void userdb_list_push(char ***list, char *s);

/* The Userdb block of document 1 (without username and password). */
json_t *userdb_entry_to_json(const struct userdb_entry *e);

/* Approximate heap bytes the entry holds (cache accounting). */
size_t userdb_entry_bytes(const struct userdb_entry *e);

/* True when the entry has no allow_nets or `ip` (text form) is inside one
 * of them. An unparseable `ip` is outside. */
bool userdb_entry_allows_ip(const struct userdb_entry *e, const char *ip);

#endif
