/* Access control lists of folders (see acl-list.h). */
#include "storage/acl/acl-list.h"

#include "core/bsearch-insert.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    enum acl_id_kind kind;
    const char *prefix;
    bool has_name;
} id_kinds[] = {
    {ACL_ID_ANYONE, "anyone", false},
    {ACL_ID_AUTHENTICATED, "authenticated", false},
    {ACL_ID_GROUP, "group=", true},
    {ACL_ID_OWNER, "owner", false},
    {ACL_ID_USER, "user=", true},
    {ACL_ID_GROUP_OVERRIDE, "group-override=", true},
};

#define KIND_COUNT (sizeof(id_kinds) / sizeof(id_kinds[0]))

bool acl_id_parse(const char *text, size_t len, struct acl_id *id, const char **why)
{
    memset(id, 0, sizeof(*id));
    if (len > 0 && text[0] == '-') {
        id->negative = true;
        text++;
        len--;
    }
    for (size_t k = 0; k < KIND_COUNT; k++) {
        size_t plen = strlen(id_kinds[k].prefix);
        if (!id_kinds[k].has_name) {
            if (len == plen && memcmp(text, id_kinds[k].prefix, plen) == 0) {
                id->kind = id_kinds[k].kind;
                return true;
            }
            continue;
        }
        if (len < plen || memcmp(text, id_kinds[k].prefix, plen) != 0)
            continue;
        const char *name = text + plen;
        size_t nlen = len - plen;
        if (nlen == 0) {
            *why = "the identifier has no name after '='";
            return false;
        }
        if (nlen > ACL_ID_NAME_MAX) {
            *why = "the identifier's name is too long";
            return false;
        }
        for (size_t i = 0; i < nlen; i++) {
            unsigned char c = (unsigned char)name[i];
            if (c <= 0x20 || c == 0x7f) {
                *why = "the identifier's name has a space or a control character";
                return false;
            }
        }
        id->kind = id_kinds[k].kind;
        memcpy(id->name, name, nlen);
        id->name[nlen] = '\0';
        return true;
    }
    *why = "unknown identifier (anyone, authenticated, owner, user=, group=, group-override=)";
    return false;
}

void acl_id_format(const struct acl_id *id, struct buf *out)
{
    if (id->negative)
        buf_append_char(out, '-');
    for (size_t k = 0; k < KIND_COUNT; k++) {
        if (id_kinds[k].kind == id->kind) {
            buf_append_str(out, id_kinds[k].prefix);
            break;
        }
    }
    buf_append_str(out, id->name);
}

int acl_id_compare(const struct acl_id *a, const struct acl_id *b)
{
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    int c = strcmp(a->name, b->name);
    if (c != 0)
        return c;
    return (int)a->negative - (int)b->negative;
}

static int entry_cmp(const void *key, const void *element)
{
    return acl_id_compare(key, &((const struct acl_entry *)element)->id);
}

/* Index of `id`, or of where it would go (with *found false). */
static size_t find_pos(const struct acl_list *list, const struct acl_id *id, bool *found)
{
    return bsearch_insert_pos(id, list->entries, list->count, sizeof(list->entries[0]), entry_cmp,
                              found);
}

const struct acl_entry *acl_list_find(const struct acl_list *list, const struct acl_id *id)
{
    bool found;
    size_t pos = find_pos(list, id, &found);
    return found ? &list->entries[pos] : NULL;
}

static void remove_at(struct acl_list *list, size_t pos)
{
    memmove(&list->entries[pos], &list->entries[pos + 1],
            (list->count - pos - 1) * sizeof(list->entries[0]));
    list->count--;
}

bool acl_list_modify(struct acl_list *list, const struct acl_id *id, uint32_t rights,
                     enum acl_modify mode)
{
    rights &= ACL_ALL_RIGHTS;
    bool found;
    size_t pos = find_pos(list, id, &found);
    uint32_t before = found ? list->entries[pos].rights : 0;
    uint32_t after = mode == ACL_MODIFY_ADD      ? before | rights
                     : mode == ACL_MODIFY_REMOVE ? before & ~rights
                                                 : rights;
    if (found && after == before)
        return false;
    if (!found && after == 0)
        return false;
    if (after == 0) {
        remove_at(list, pos);
        return true;
    }
    if (found) {
        list->entries[pos].rights = after;
        return true;
    }
    list->entries = xgrow(list->entries, &list->cap, list->count + 1, sizeof(list->entries[0]));
    memmove(&list->entries[pos + 1], &list->entries[pos],
            (list->count - pos) * sizeof(list->entries[0]));
    list->entries[pos].id = *id;
    list->entries[pos].rights = after;
    list->count++;
    return true;
}

bool acl_list_remove(struct acl_list *list, const struct acl_id *id)
{
    bool found;
    size_t pos = find_pos(list, id, &found);
    if (found)
        remove_at(list, pos);
    return found;
}

void acl_list_copy(struct acl_list *to, const struct acl_list *from)
{
    to->count = 0;
    if (from->count > 0) {
        to->entries = xgrow(to->entries, &to->cap, from->count, sizeof(to->entries[0]));
        memcpy(to->entries, from->entries, from->count * sizeof(from->entries[0]));
    }
    to->count = from->count;
}

bool acl_list_equal(const struct acl_list *a, const struct acl_list *b)
{
    if (a->count != b->count)
        return false;
    for (size_t i = 0; i < a->count; i++) {
        if (acl_id_compare(&a->entries[i].id, &b->entries[i].id) != 0 ||
            a->entries[i].rights != b->entries[i].rights)
            return false;
    }
    return true;
}

void acl_list_clear(struct acl_list *list)
{
    list->count = 0;
}

void acl_list_free(struct acl_list *list)
{
    free(list->entries);
    memset(list, 0, sizeof(*list));
}

static bool matches(const struct acl_id *id, const struct acl_identity *who)
{
    switch (id->kind) {
    case ACL_ID_ANYONE:
        return true;
    case ACL_ID_AUTHENTICATED:
        return who->user != NULL;
    case ACL_ID_OWNER:
        return who->user != NULL && who->owner;
    case ACL_ID_USER:
        return who->user != NULL && strcmp(who->user, id->name) == 0;
    case ACL_ID_GROUP:
    case ACL_ID_GROUP_OVERRIDE:
        for (size_t i = 0; who->user != NULL && i < who->group_count; i++) {
            if (strcmp(who->groups[i], id->name) == 0)
                return true;
        }
        return false;
    }
    return false;
}

uint32_t acl_list_rights(const struct acl_list *list, const struct acl_identity *who)
{
    uint32_t grant = 0, deny = 0, override_grant = 0, override_deny = 0;
    bool override = false, owner_entry = false;
    for (size_t i = 0; i < list->count; i++) {
        const struct acl_entry *e = &list->entries[i];
        /* An entry naming the owner, as "owner" or by name, replaces
         * their implicit rights (Dovecot 2.3 does the same). */
        if (!e->id.negative && who->user != NULL && who->owner &&
            (e->id.kind == ACL_ID_OWNER ||
             (e->id.kind == ACL_ID_USER && strcmp(e->id.name, who->user) == 0)))
            owner_entry = true;
        if (!matches(&e->id, who))
            continue;
        if (e->id.kind == ACL_ID_GROUP_OVERRIDE) {
            override = true;
            if (e->id.negative)
                override_deny |= e->rights;
            else
                override_grant |= e->rights;
            continue;
        }
        if (e->id.negative)
            deny |= e->rights;
        else
            grant |= e->rights;
    }
    if (override)
        return override_grant & ~override_deny;
    if (who->user != NULL && who->owner && !owner_entry)
        grant = ACL_ALL_RIGHTS;
    return grant & ~deny;
}
