/* Dovecot passwd-file parser (see passwd-file.h for the format).
 *
 * Lines are parsed in file order; a hash set of the usernames seen so far
 * finds duplicates at once, so problems are reported in line order. When
 * the file is done the entries are sorted bytewise and lookups are a binary
 * search (log2(100k) = 17 comparisons), which also gives
 * passwd_file_user_at() its order for free.
 *
 * Compatibility details taken from Dovecot's db-passwd-file.c:
 * - everything after the seventh ':' is the extra-fields text, so values
 *   may contain ':' (`userdb_mail=maildir:~/Maildir`);
 * - the old layout with an empty eighth field and the mail location in the
 *   ninth (`...:shell::maildir:~/Maildir`) sets `mail`;
 * - libpam-pwdfile passwords `hash[13]` (crypt) and `hash[34]` (PLAIN-MD5)
 *   get their `{SCHEME}` prefix;
 * - uid 0 and gid 0 are refused (mail is never delivered as root).
 * An empty password field means "no password": the entry's password stays
 * NULL and a passdb lookup can never match it. */
#include "services/auth/passwd-file.h"

#include "core/buf.h"
#include "core/xalloc.h"
#include "services/auth/auth-db.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PASSWD_FILE_FIELDS 7 /* user, password, uid, gid, gecos, home, shell */

struct passwd_file {
    struct userdb_entry **entries; /* sorted by username once parsing ends */
    size_t count;
    size_t cap;
};

/* Open-addressing set of the usernames parsed so far: slot = index + 1
 * into the parser's arrays, 0 = empty. Used only while parsing. */
struct name_set {
    size_t *slots;
    size_t mask;
};

struct parser {
    struct passwd_file *pf;
    size_t *first_line; /* line of entries[i], for duplicate reports */
    struct name_set names;
    passwd_file_problem_fn *problem;
    void *ctx;
    size_t line;
    struct buf scratch;
};

static void report(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(struct parser *p, const char *fmt, ...)
{
    if (p->problem == NULL)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->problem(p->line, msg, p->ctx);
}

/* ---------- the name set ---------- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a */
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* The slot holding `name`, or the empty slot where it would go. */
static size_t *name_slot(struct parser *p, const char *name)
{
    size_t i = (size_t)name_hash(name) & p->names.mask;
    for (;;) {
        size_t *slot = &p->names.slots[i];
        if (*slot == 0 || strcmp(p->pf->entries[*slot - 1]->username, name) == 0)
            return slot;
        i = (i + 1) & p->names.mask;
    }
}

/* Keeps the set at most half full. */
static void names_grow(struct parser *p)
{
    size_t size = p->names.mask + 1;
    if (p->names.slots != NULL && p->pf->count < size / 2)
        return;
    size_t new_size = p->names.slots == NULL ? 64 : size * 2;
    free(p->names.slots);
    p->names.slots = xcalloc(new_size, sizeof(*p->names.slots));
    p->names.mask = new_size - 1;
    for (size_t i = 0; i < p->pf->count; i++)
        *name_slot(p, p->pf->entries[i]->username) = i + 1;
}

/* ---------- one line ---------- */

/* `hash[13]` / `hash[34]` (libpam-pwdfile) -> `{CRYPT}hash` / `{PLAIN-MD5}hash`. */
static char *password_of(const char *field)
{
    size_t len = strlen(field);
    if (len == 0)
        return NULL;
    if (len > 4 && field[0] != '{' && field[0] != '$' && field[len - 4] == '[' &&
        field[len - 1] == ']') {
        const char *tag = field + len - 3;
        if (strncmp(tag, "13", 2) == 0)
            return xasprintf("{CRYPT}%.*s", (int)(len - 4), field);
        if (strncmp(tag, "34", 2) == 0)
            return xasprintf("{PLAIN-MD5}%.*s", (int)(len - 4), field);
    }
    return xstrdup(field);
}

/* Sets uid or gid (`name`) from a non-empty field; refuses 0. */
static bool set_id(struct parser *p, struct userdb_entry *e, const char *name, const char *value)
{
    char *error = NULL;
    if (!userdb_entry_set(e, name, value, &error)) {
        report(p, "%s", error);
        free(error);
        return false;
    }
    int64_t id = strcmp(name, "uid") == 0 ? e->uid : e->gid;
    if (id == 0) {
        report(p, "%s 0 (root) is not allowed", name);
        return false;
    }
    return true;
}

/* Space-separated `key=value` (or a bare `key`, meaning "yes"). */
static bool set_extra_fields(struct parser *p, struct userdb_entry *e, char *text)
{
    char *save = NULL;
    for (char *tok = strtok_r(text, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        const char *value = "yes";
        if (eq != NULL) {
            *eq = '\0';
            value = eq + 1;
        }
        if (*tok == '\0') {
            report(p, "extra field without a name");
            return false;
        }
        char *error = NULL;
        if (!userdb_entry_set(e, tok, value, &error)) {
            report(p, "%s", error);
            free(error);
            return false;
        }
    }
    return true;
}

/* Fills `e` from the fields after the username; false (reported) when a
 * field is malformed. `rest` is the text after the seventh ':' or NULL. */
static bool fill_entry(struct parser *p, struct userdb_entry *e, char **f, size_t n, char *rest)
{
    if (n > 1)
        e->password = password_of(f[1]);
    if (n > 2 && f[2][0] != '\0' && !set_id(p, e, "uid", f[2]))
        return false;
    if (n > 3 && f[3][0] != '\0' && !set_id(p, e, "gid", f[3]))
        return false;
    /* f[4] gecos and f[6] shell are unused, as in Dovecot */
    char *error = NULL;
    if (n > 5 && f[5][0] != '\0' && !userdb_entry_set(e, "home", f[5], &error)) {
        report(p, "%s", error);
        free(error);
        return false;
    }
    if (rest == NULL)
        return true;
    if (rest[0] == ':') {
        /* old layout: empty eighth field, the mail location after it */
        if (rest[1] != '\0' && !userdb_entry_set(e, "mail", rest + 1, &error)) {
            report(p, "%s", error);
            free(error);
            return false;
        }
        return true;
    }
    return set_extra_fields(p, e, rest);
}

static void add_entry(struct parser *p, struct userdb_entry *e)
{
    struct passwd_file *pf = p->pf;
    size_t old_cap = pf->cap;
    pf->entries = xgrow(pf->entries, &pf->cap, pf->count + 1, sizeof(*pf->entries));
    if (pf->cap != old_cap)
        p->first_line = xrealloc(p->first_line, pf->cap * sizeof(*p->first_line));
    pf->entries[pf->count] = e;
    p->first_line[pf->count] = p->line;
    pf->count++;
    *name_slot(p, e->username) = pf->count;
    names_grow(p);
}

/* One line without its line end; `len` <= PASSWD_FILE_MAX_LINE. */
static void parse_line(struct parser *p, const char *text, size_t len)
{
    if (len == 0 || text[0] == '#')
        return;
    if (memchr(text, '\0', len) != NULL) {
        report(p, "NUL byte in the line");
        return;
    }
    buf_reset(&p->scratch);
    buf_append(&p->scratch, text, len);
    char *line = p->scratch.data;

    char *f[PASSWD_FILE_FIELDS] = {0};
    size_t n = 0;
    char *rest = NULL;
    char *at = line;
    for (;;) {
        f[n++] = at;
        char *colon = strchr(at, ':');
        if (colon == NULL)
            break;
        *colon = '\0';
        at = colon + 1;
        if (n == PASSWD_FILE_FIELDS) {
            rest = at;
            break;
        }
    }
    if (n < 2) {
        report(p, "too few fields: a line needs at least user:password");
        return;
    }
    if (!auth_username_valid(f[0])) {
        report(p, "invalid username");
        return;
    }
    size_t *slot = name_slot(p, f[0]);
    if (*slot != 0) {
        report(p, "duplicate user %s (first on line %zu): ignored", f[0], p->first_line[*slot - 1]);
        return;
    }
    if (p->pf->count >= PASSWD_FILE_MAX_USERS) {
        report(p, "more than %d users: user ignored", PASSWD_FILE_MAX_USERS);
        return;
    }
    struct userdb_entry *e = userdb_entry_new(f[0]);
    if (!fill_entry(p, e, f, n, rest)) {
        userdb_entry_free(e);
        return;
    }
    add_entry(p, e);
}

static int compare_entries(const void *a, const void *b)
{
    const struct userdb_entry *const *x = a;
    const struct userdb_entry *const *y = b;
    return strcmp((*x)->username, (*y)->username);
}

struct passwd_file *passwd_file_parse(const char *text, size_t len, passwd_file_problem_fn *problem,
                                      void *ctx)
{
    struct passwd_file *pf = xcalloc(1, sizeof(*pf));
    struct parser p = {.pf = pf, .problem = problem, .ctx = ctx};
    names_grow(&p);
    size_t pos = 0;
    while (pos < len) {
        p.line++;
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t line_len = nl != NULL ? (size_t)(nl - start) : len - pos;
        pos += line_len + (nl != NULL ? 1 : 0);
        if (line_len > 0 && start[line_len - 1] == '\r')
            line_len--;
        if (line_len > PASSWD_FILE_MAX_LINE) {
            report(&p, "line longer than %d bytes", PASSWD_FILE_MAX_LINE);
            continue;
        }
        parse_line(&p, start, line_len);
    }
    free(p.names.slots);
    free(p.first_line);
    buf_free(&p.scratch);
    if (pf->count > 1)
        qsort(pf->entries, pf->count, sizeof(*pf->entries), compare_entries);
    return pf;
}

void passwd_file_free(struct passwd_file *pf)
{
    if (pf == NULL)
        return;
    for (size_t i = 0; i < pf->count; i++)
        userdb_entry_free(pf->entries[i]);
    free(pf->entries);
    free(pf);
}

size_t passwd_file_count(const struct passwd_file *pf)
{
    return pf->count;
}

const struct userdb_entry *passwd_file_find(const struct passwd_file *pf, const char *username)
{
    size_t lo = 0;
    size_t hi = pf->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(username, pf->entries[mid]->username);
        if (c == 0)
            return pf->entries[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *passwd_file_user_at(const struct passwd_file *pf, size_t i)
{
    return i < pf->count ? pf->entries[i]->username : NULL;
}
