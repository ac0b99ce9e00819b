/* One folder's access control list: entries of (identifier, rights),
 * positive or negative, and the rights they give someone.
 *
 * Identifiers, in the text form of dovecot-acl files and of the API:
 * "anyone", "authenticated", "owner", "user=<name>", "group=<name>",
 * "group-override=<name>" (Dovecot's: when one matches, its rights replace
 * what the other entries would give); a leading "-" makes the entry
 * negative. A list holds at most one positive and one negative entry per
 * identifier, sorted as Dovecot lists them: by kind (anyone,
 * authenticated, group, owner, user, group-override), then name, the
 * positive before the negative. */
#ifndef PETREL_STORAGE_ACL_ACL_LIST_H
#define PETREL_STORAGE_ACL_ACL_LIST_H

#include "core/buf.h"
#include "storage/acl/acl-rights.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest name after "user=" or "group=". */
#define ACL_ID_NAME_MAX 255

enum acl_id_kind {
    ACL_ID_ANYONE,
    ACL_ID_AUTHENTICATED,
    ACL_ID_GROUP,
    ACL_ID_OWNER,
    ACL_ID_USER,
    ACL_ID_GROUP_OVERRIDE,
};

struct acl_id {
    enum acl_id_kind kind;
    bool negative;
    char name[ACL_ID_NAME_MAX + 1]; /* "" for anyone, authenticated, owner */
};

struct acl_entry {
    struct acl_id id;
    uint32_t rights;
};

struct acl_list {
    struct acl_entry *entries;
    size_t count;
    size_t cap;
};

/* Who asks: the user, the groups the userdb gives them, and whether they
 * own the folder (its personal namespace is theirs). A NULL user is
 * nobody logged in (only "anyone" matches). */
struct acl_identity {
    const char *user;
    const char *const *groups;
    size_t group_count;
    bool owner;
};

/* Parses an identifier ("-user=bob"). False with a message on anything
 * else: an unknown kind, an empty name, a name with a space or a control
 * character, a name longer than ACL_ID_NAME_MAX. */
bool acl_id_parse(const char *text, size_t len, struct acl_id *id, const char **why);

/* Appends the identifier's text form. */
void acl_id_format(const struct acl_id *id, struct buf *out);

/* Sort order of identifiers (see the top of this file). */
int acl_id_compare(const struct acl_id *a, const struct acl_id *b);

enum acl_modify {
    ACL_MODIFY_REPLACE, /* the identifier's rights become `rights` */
    ACL_MODIFY_ADD,     /* `rights` are added */
    ACL_MODIFY_REMOVE,  /* `rights` are taken away */
};

/* Changes one identifier's rights; an entry left with no rights goes.
 * Returns whether the list changed. */
bool acl_list_modify(struct acl_list *list, const struct acl_id *id, uint32_t rights,
                     enum acl_modify mode);

/* Removes the identifier's entry; whether there was one. */
bool acl_list_remove(struct acl_list *list, const struct acl_id *id);

/* The entry of `id`, or NULL. */
const struct acl_entry *acl_list_find(const struct acl_list *list, const struct acl_id *id);

/* Copies `from` into `to` (emptied first): a new folder's ACL is its
 * parent's (or the namespace root's) at creation. */
void acl_list_copy(struct acl_list *to, const struct acl_list *from);

/* Whether two lists hold the same entries. */
bool acl_list_equal(const struct acl_list *a, const struct acl_list *b);

void acl_list_clear(struct acl_list *list);
void acl_list_free(struct acl_list *list);

/* The rights `who` has on a folder with this list: the union of the
 * positive entries that match minus the union of the negative ones (RFC
 * 4314 section 2). The owner of a personal folder has every right unless
 * an "owner" entry or a user= entry with their name says otherwise. Matching group-override
 * entries, when there are any, decide alone. */
uint32_t acl_list_rights(const struct acl_list *list, const struct acl_identity *who);

#endif
