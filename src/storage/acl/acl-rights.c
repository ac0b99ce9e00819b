/* RFC 4314 rights letters (see acl-rights.h). */
#include "storage/acl/acl-rights.h"

#include <string.h>

static const struct {
    char letter;
    uint32_t bit;
    const char *name; /* Dovecot's name in dovecot-acl files */
} rights_table[] = {
    {'l', ACL_LOOKUP, "lookup"},         {'r', ACL_READ, "read"},
    {'s', ACL_WRITE_SEEN, "write-seen"}, {'w', ACL_WRITE, "write"},
    {'i', ACL_INSERT, "insert"},         {'p', ACL_POST, "post"},
    {'k', ACL_CREATE, "create"},         {'x', ACL_DELETE, "delete"},
    {'t', ACL_WRITE_DELETED, "write-deleted"}, {'e', ACL_EXPUNGE, "expunge"},
    {'a', ACL_ADMIN, "admin"},
};

#define VIRTUAL_C (ACL_CREATE | ACL_DELETE)
#define VIRTUAL_D (ACL_EXPUNGE | ACL_WRITE_DELETED)

bool acl_rights_parse(const char *text, size_t len, uint32_t *rights, char *bad)
{
    uint32_t r = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == 'c') {
            r |= VIRTUAL_C;
            continue;
        }
        if (c == 'd') {
            r |= VIRTUAL_D;
            continue;
        }
        size_t k = 0;
        while (k < sizeof(rights_table) / sizeof(rights_table[0]) && rights_table[k].letter != c)
            k++;
        if (k == sizeof(rights_table) / sizeof(rights_table[0])) {
            if (bad != NULL)
                *bad = c;
            return false;
        }
        r |= rights_table[k].bit;
    }
    *rights = r;
    return true;
}

const char *acl_rights_str(uint32_t rights, bool virtual_rights, char out[14])
{
    size_t n = 0;
    for (size_t k = 0; k < sizeof(rights_table) / sizeof(rights_table[0]); k++) {
        if (virtual_rights && rights_table[k].bit == ACL_ADMIN) { /* c and d come before a */
            if (rights & VIRTUAL_C)
                out[n++] = 'c';
            if (rights & VIRTUAL_D)
                out[n++] = 'd';
        }
        if (rights & rights_table[k].bit)
            out[n++] = rights_table[k].letter;
    }
    out[n] = '\0';
    return out;
}

void acl_rights_format(uint32_t rights, bool virtual_rights, struct buf *out)
{
    char text[14];
    buf_append_str(out, acl_rights_str(rights, virtual_rights, text));
}

char acl_right_letter(uint32_t right)
{
    for (size_t k = 0; k < sizeof(rights_table) / sizeof(rights_table[0]); k++) {
        if (rights_table[k].bit == right)
            return rights_table[k].letter;
    }
    return 0;
}

uint32_t acl_right_from_name(const char *name, size_t len)
{
    for (size_t k = 0; k < sizeof(rights_table) / sizeof(rights_table[0]); k++) {
        if (strlen(rights_table[k].name) == len && memcmp(rights_table[k].name, name, len) == 0)
            return rights_table[k].bit;
    }
    return 0;
}
