/* libFuzzer target: Dovecot's passwd-file (services/auth/passwd-file.h).
 * Input: file contents, any bytes.
 *   Problems are reported with line numbers in ascending order, inside the
 *   input, with a non-empty message; the table holds at most one user per
 *   line; its usernames are valid (auth_username_valid), strictly sorted,
 *   and each one is found again by passwd_file_find with its own record;
 *   uid/gid are unset or 1..2^32-2; passwords are never empty strings;
 *   the usernames at the start of the first lines are looked up and either
 *   missing or found with that name. */
#include "services/auth/auth-db.h"
#include "services/auth/passwd-file.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LOOKUPS 4

struct seen {
    size_t lines;
    size_t last_line;
    size_t problems;
};

static void problem(size_t line, const char *message, void *ctx)
{
    struct seen *s = ctx;
    assert(line >= 1 && line <= s->lines);
    assert(line > s->last_line); /* one problem per line, in file order */
    assert(message != NULL && message[0] != '\0');
    s->last_line = line;
    s->problems++;
}

static size_t count_lines(const uint8_t *data, size_t size)
{
    size_t lines = 0;
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    return lines + (size > 0 && data[size - 1] != '\n');
}

static void check_entry(const struct userdb_entry *e, const char *name)
{
    assert(e != NULL);
    assert(strcmp(e->username, name) == 0);
    assert(e->password == NULL || e->password[0] != '\0');
    assert(e->uid == -1 || (e->uid >= 1 && e->uid <= 4294967294LL));
    assert(e->gid == -1 || (e->gid >= 1 && e->gid <= 4294967294LL));
    assert(e->home != NULL && e->mail_location != NULL);
    assert(e->groups != NULL && e->quota_rule != NULL && e->allow_nets != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct seen seen = {.lines = count_lines(data, size)};
    struct passwd_file *pf = passwd_file_parse((const char *)data, size, problem, &seen);
    size_t count = passwd_file_count(pf);
    assert(count + seen.problems <= seen.lines);
    for (size_t i = 0; i < count; i++) {
        const char *name = passwd_file_user_at(pf, i);
        assert(auth_username_valid(name));
        assert(i == 0 || strcmp(passwd_file_user_at(pf, i - 1), name) < 0);
        check_entry(passwd_file_find(pf, name), name);
    }
    assert(passwd_file_user_at(pf, count) == NULL);

    /* The text before the first ':' of the first lines, as a client would send it. */
    const char *p = (const char *)data;
    const char *end = p + size;
    for (int n = 0; n < LOOKUPS && p < end; n++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl != NULL ? nl : end;
        const char *colon = memchr(p, ':', (size_t)(line_end - p));
        size_t len = (size_t)((colon != NULL ? colon : line_end) - p);
        char *name = malloc(len + 1);
        memcpy(name, p, len);
        name[len] = '\0';
        const struct userdb_entry *e = passwd_file_find(pf, name);
        if (e != NULL)
            check_entry(e, name);
        free(name);
        p = line_end + 1;
    }
    assert(passwd_file_find(pf, "") == NULL);
    passwd_file_free(pf);
    return 0;
}
