/* petrelctl backend who [--service S] [--user U] [--group-by user|none]
 * petrelctl backend who count [--by protocol|user] [--service S] [--user U]
 *
 * Active sessions from the warden through /api/backend/who and
 * /api/backend/who/count. Readable output is a table: per user (sessions,
 * services, addresses) when grouped by user, per session otherwise; counts
 * print as "key: value" lines. --json prints the API's reply. */
#include "ctl/ctl.h"

#include "core/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct who_options {
    const char *service;
    const char *user;
    const char *group_by;
    const char *by;
};

static int usage(void)
{
    fprintf(stderr, "usage: petrelctl backend who [--service S] [--user U] "
                    "[--group-by user|none]\n"
                    "       petrelctl backend who count [--by protocol|user] [--service S] "
                    "[--user U]\n"
                    "services: imap, pop3, submission, lmtp\n");
    return CTL_USAGE;
}

/* Reads the options after the command words; false on anything else. */
static bool parse(int argc, char **argv, bool count, struct who_options *o)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (next == NULL)
            return false;
        if (strcmp(a, "--service") == 0)
            o->service = next;
        else if (strcmp(a, "--user") == 0)
            o->user = next;
        else if (!count && strcmp(a, "--group-by") == 0)
            o->group_by = next;
        else if (count && strcmp(a, "--by") == 0)
            o->by = next;
        else
            return false;
        i++;
    }
    return true;
}

/* Appends `s` to a comma list unless it is there already. */
static void add_unique(struct buf *list, const char *s)
{
    size_t n = strlen(s);
    const char *p = list->len > 0 ? list->data : "";
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        if (len == n && memcmp(p, s, n) == 0)
            return;
        p += len + (p[len] == ',' ? 1 : 0);
    }
    if (list->len > 0)
        buf_append_char(list, ',');
    buf_append_str(list, s);
}

static const char *field(const json_t *obj, const char *key)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return v != NULL ? v : "";
}

struct row {
    char *cells[5];
};

static void print_table(const char *const *header, size_t columns, struct row *rows, size_t n)
{
    size_t width[5] = {0};
    for (size_t c = 0; c < columns; c++) {
        width[c] = strlen(header[c]);
        for (size_t r = 0; r < n; r++) {
            size_t len = strlen(rows[r].cells[c]);
            if (len > width[c])
                width[c] = len;
        }
    }
    for (size_t c = 0; c < columns; c++)
        printf("%-*s%s", c + 1 < columns ? (int)width[c] : 0, header[c],
               c + 1 < columns ? "  " : "\n");
    for (size_t r = 0; r < n; r++) {
        for (size_t c = 0; c < columns; c++)
            printf("%-*s%s", c + 1 < columns ? (int)width[c] : 0, rows[r].cells[c],
                   c + 1 < columns ? "  " : "\n");
    }
}

static void free_rows(struct row *rows, size_t n, size_t columns)
{
    for (size_t r = 0; r < n; r++) {
        for (size_t c = 0; c < columns; c++)
            free(rows[r].cells[c]);
    }
    free(rows);
}

static void *no_memory(void)
{
    fprintf(stderr, "petrelctl: out of memory\n");
    exit(CTL_REFUSED);
}

/* `n` empty rows; one more, as calloc() may answer NULL for none. */
static struct row *rows_new(size_t n)
{
    struct row *rows = calloc(n + 1, sizeof(*rows));
    return rows != NULL ? rows : no_memory();
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d == NULL)
        return no_memory();
    memcpy(d, s, n);
    return d;
}

/* One row per user: sessions, services and addresses. */
static void print_groups(const json_t *groups)
{
    static const char *const header[] = {"USER", "SESSIONS", "SERVICES", "IPS"};
    size_t n = json_array_size(groups);
    struct row *rows = rows_new(n);
    for (size_t i = 0; i < n; i++) {
        const json_t *g = json_array_get(groups, i);
        const json_t *sessions = json_object_get(g, "sessions");
        struct buf services = {0}, ips = {0};
        for (size_t k = 0; k < json_array_size(sessions); k++) {
            const json_t *s = json_array_get(sessions, k);
            add_unique(&services, field(s, "service"));
            if (field(s, "ip")[0] != '\0')
                add_unique(&ips, field(s, "ip"));
        }
        char total[32];
        snprintf(total, sizeof(total), "%lld",
                 (long long)json_integer_value(json_object_get(g, "total")));
        rows[i].cells[0] = dup_str(field(g, "user"));
        rows[i].cells[1] = dup_str(total);
        rows[i].cells[2] = dup_str(buf_cstr(&services));
        rows[i].cells[3] = dup_str(ips.len > 0 ? buf_cstr(&ips) : "-");
        buf_free(&services);
        buf_free(&ips);
    }
    print_table(header, 4, rows, n);
    free_rows(rows, n, 4);
}

/* One row per session. */
static void print_sessions(const json_t *sessions)
{
    static const char *const header[] = {"USER", "SERVICE", "IP", "CONNECTED", "ID"};
    static const char *const keys[] = {"user", "service", "ip", "connected_at", "id"};
    size_t n = json_array_size(sessions);
    struct row *rows = rows_new(n);
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_array_get(sessions, i);
        for (size_t c = 0; c < 5; c++)
            rows[i].cells[c] = dup_str(field(s, keys[c])[0] != '\0' ? field(s, keys[c]) : "-");
    }
    print_table(header, 5, rows, n);
    free_rows(rows, n, 5);
}

static int request(const struct ctl_options *opts, const char *path, json_t *body, bool list)
{
    struct ctl_response resp;
    enum ctl_exit rc = ctl_post_json(&opts->backend, path, body, &resp);
    if (rc != CTL_OK)
        return rc;
    json_t *v = NULL;
    if (list && !opts->json && resp.status == 200)
        v = json_loadb(resp.body, resp.len, 0, NULL);
    if (v == NULL || !json_is_object(v)) {
        rc = ctl_print_reply(opts, &resp); /* errors, --json, counts */
    } else {
        const json_t *groups = json_object_get(v, "groups");
        if (json_is_array(groups))
            print_groups(groups);
        else
            print_sessions(json_object_get(v, "sessions"));
        printf("total: %lld\n", (long long)json_integer_value(json_object_get(v, "total")));
        rc = CTL_OK;
    }
    json_decref(v);
    ctl_response_free(&resp);
    return rc;
}

int ctl_backend_who(const struct ctl_options *opts, int argc, char **argv)
{
    /* argv[0] == "who" */
    bool count = argc >= 2 && strcmp(argv[1], "count") == 0;
    int first = count ? 2 : 1;
    struct who_options o = {0};
    if (!parse(argc - first, argv + first, count, &o))
        return usage();
    json_t *body = json_object();
    if (o.service != NULL)
        json_object_set_new(body, "service", json_string(o.service));
    if (o.user != NULL)
        json_object_set_new(body, "user", json_string(o.user));
    if (o.group_by != NULL)
        json_object_set_new(body, "group_by", json_string(o.group_by));
    if (o.by != NULL)
        json_object_set_new(body, "by", json_string(o.by));
    /* json_string refuses invalid UTF-8: the server would refuse it too. */
    if (json_object_size(body) !=
        (size_t)((o.service != NULL) + (o.user != NULL) + (o.group_by != NULL) + (o.by != NULL))) {
        json_decref(body);
        fprintf(stderr, "petrelctl: arguments must be UTF-8\n");
        return CTL_USAGE;
    }
    return request(opts, count ? "/api/backend/who/count" : "/api/backend/who", body, !count);
}
