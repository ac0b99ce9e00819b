/* petrelctl backend folder|index|subscriptions|specialuse|user|mail ...
 * Each command is a row of a table: the endpoint, the positional arguments
 * it takes (mapped to JSON fields) and the options it accepts. */
#include "ctl/ctl.h"

#include "core/base64.h"
#include "core/buf.h"
#include "core/slice.h"
#include "core/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_POSITIONAL 3
#define MAX_UIDS 100000

struct command {
    const char *area;
    const char *name;
    const char *path;
    const char *fields[MAX_POSITIONAL]; /* JSON field per positional argument */
    const char *usage;
};

static const struct command commands[] = {
    {"folder", "list", "/api/backend/folder/list", {"user"}, "<user> [--namespace NS]"},
    {"folder", "info", "/api/backend/folder/info", {"user", "folder"}, "<user> <folder>"},
    {"folder", "guid", "/api/backend/folder/guid", {"user", "folder"}, "<user> <folder>"},
    {"folder", "stats", "/api/backend/folder/stats", {"user", "folder"}, "<user> <folder>"},
    {"folder",
     "create",
     "/api/backend/folder/create",
     {"user", "folder"},
     "<user> <folder> [--special-use ATTR]"},
    {"folder", "delete", "/api/backend/folder/delete", {"user", "folder"}, "<user> <folder>"},
    {"folder",
     "rename",
     "/api/backend/folder/rename",
     {"user", "old_folder", "new_folder"},
     "<user> <old> <new>"},
    {"folder",
     "expunge",
     "/api/backend/folder/expunge",
     {"user", "folder"},
     "<user> <folder> [--uid N]..."},
    {"index", "dump", "/api/backend/index/dump", {"user", "folder"}, "<user> <folder> [--limit N]"},
    {"index",
     "rebuild",
     "/api/backend/index/rebuild",
     {"user", "folder"},
     "<user> <folder> [--reset-uids]"},
    {"index", "optimize", "/api/backend/index/optimize", {"user", "folder"}, "<user> <folder>"},
    {"index", "cache-purge", "/api/backend/index/cache-purge", {"user", "folder"},
     "<user> <folder>"},
    {"subscriptions", "list", "/api/backend/subscriptions/list", {"user"},
     "<user> [--namespace NS]"},
    {"subscriptions", "add", "/api/backend/subscriptions/add", {"user", "folder"},
     "<user> <folder>"},
    {"subscriptions", "remove", "/api/backend/subscriptions/remove", {"user", "folder"},
     "<user> <folder>"},
    {"subscriptions", "migrate", "/api/backend/subscriptions/migrate", {"user"},
     "<user> --namespace NS [--apply]"},
    {"specialuse", "list", "/api/backend/specialuse/list", {"user"}, "<user>"},
    {"specialuse", "get", "/api/backend/specialuse/get", {"user", "folder"}, "<user> <folder>"},
    {"specialuse", "set", "/api/backend/specialuse/set", {"user", "folder", "attr"},
     "<user> <folder> <attr>"},
    {"specialuse", "delete", "/api/backend/specialuse/delete", {"user", "folder"},
     "<user> <folder>"},
    {"user", "info", "/api/backend/user/info", {"user"}, "<user>"},
    {"user", "iterate", "/api/backend/user/iterate", {NULL}, ""},
    {"user", "usage", "/api/backend/user/usage", {"user"}, "<user>"},
};

struct options {
    const char *ns;
    const char *special_use;
    long long limit;
    bool reset_uids;
    bool apply;
    json_t *uids;
    json_t *flags;
    long long internal_date;
};

static void usage_area(const char *area)
{
    fprintf(stderr, "usage: petrelctl backend %s <command> ...\n", area);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(commands[i].area, area) == 0)
            fprintf(stderr, "  %-12s %s\n", commands[i].name, commands[i].usage);
    }
    if (strcmp(area, "mail") == 0) {
        fprintf(stderr, "  %-12s %s\n", "append",
                "<user> <folder> <file|-> [--flag F]... [--date EPOCH]");
        fprintf(stderr, "  %-12s %s\n", "import", "<user> <folder> <mbox file | maildir dir>");
    }
    fprintf(stderr, "common option: --namespace NS (default personal)\n");
}

static bool parse_number(const char *text, long long min, long long *out)
{
    int64_t v = 0;
    if (!str_parse_i64(text, min, INT64_MAX, &v))
        return false;
    *out = v;
    return true;
}

/* Consumes options anywhere in argv; positionals stay (compacted) in argv. */
static int parse_options(int argc, char **argv, struct options *o)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--namespace") == 0 && next != NULL) {
            o->ns = next;
            i++;
        } else if (strcmp(a, "--special-use") == 0 && next != NULL) {
            o->special_use = next;
            i++;
        } else if (strcmp(a, "--limit") == 0 && next != NULL) {
            if (!parse_number(next, 1, &o->limit))
                return -1;
            i++;
        } else if (strcmp(a, "--uid") == 0 && next != NULL) {
            long long uid;
            if (!parse_number(next, 1, &uid) || uid > 4294967295LL)
                return -1;
            if (o->uids == NULL)
                o->uids = json_array();
            json_array_append_new(o->uids, json_integer(uid));
            i++;
        } else if (strcmp(a, "--flag") == 0 && next != NULL) {
            if (o->flags == NULL)
                o->flags = json_array();
            json_array_append_new(o->flags, json_string(next));
            i++;
        } else if (strcmp(a, "--date") == 0 && next != NULL) {
            if (!parse_number(next, 0, &o->internal_date))
                return -1;
            i++;
        } else if (strcmp(a, "--reset-uids") == 0) {
            o->reset_uids = true;
        } else if (strcmp(a, "--apply") == 0) {
            o->apply = true;
        } else if (strncmp(a, "--", 2) == 0) {
            fprintf(stderr, "petrelctl: unknown option %s\n", a);
            return -1;
        } else {
            argv[n++] = argv[i];
        }
    }
    return n;
}

/* ---------- mail append / import ---------- */

/* Sends one message; quiet unless it fails. Returns the exit code. */
static int append_one(const struct ctl_options *opts, const char *user, const char *folder,
                      const struct options *o, const char *data, size_t len, json_t *flags,
                      long long internal_date, bool print)
{
    struct buf b64 = {0};
    base64_encode_append(&b64, data, len);
    json_t *body = json_pack("{s:s, s:s, s:s}", "user", user, "folder", folder, "message",
                             buf_cstr(&b64));
    buf_free(&b64);
    if (o->ns != NULL)
        json_object_set_new(body, "namespace", json_string(o->ns));
    if (flags != NULL)
        json_object_set(body, "flags", flags);
    if (internal_date > 0)
        json_object_set_new(body, "internal_date", json_integer(internal_date));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct ctl_response resp;
    enum ctl_exit rc = ctl_http(&opts->backend, "POST", "/api/backend/mail/append", text, &resp);
    free(text);
    if (rc != CTL_OK)
        return rc;
    if (print || resp.status != 200)
        rc = ctl_print_reply(opts, &resp);
    ctl_response_free(&resp);
    return rc;
}

/* Maildir flag letters of a file name -> IMAP flag names. */
static json_t *flags_from_maildir_name(const char *name)
{
    json_t *flags = json_array();
    const char *info = strstr(name, ":2,");
    if (info == NULL)
        return flags;
    for (const char *p = info + 3; *p != '\0'; p++) {
        const char *f = *p == 'S'   ? "\\Seen"
                        : *p == 'R' ? "\\Answered"
                        : *p == 'F' ? "\\Flagged"
                        : *p == 'T' ? "\\Deleted"
                        : *p == 'D' ? "\\Draft"
                        : *p == 'P' ? "$Forwarded"
                                    : NULL;
        if (f != NULL)
            json_array_append_new(flags, json_string(f));
    }
    return flags;
}

static int import_maildir(const struct ctl_options *opts, const char *user, const char *folder,
                          const struct options *o, const char *dir, size_t *count)
{
    static const char *const subs[] = {"cur", "new"};
    int rc = CTL_OK;
    for (size_t s = 0; s < 2 && rc == CTL_OK; s++) {
        char *path = xasprintf("%s/%s", dir, subs[s]);
        struct dirent **names = NULL;
        int n = scandir(path, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            if (rc == CTL_OK && names[i]->d_name[0] != '.') {
                char *file = xasprintf("%s/%s", path, names[i]->d_name);
                FILE *in = fopen(file, "rb");
                struct buf msg = {0};
                struct stat st;
                if (in != NULL && buf_append_stream(&msg, in) && stat(file, &st) == 0) {
                    json_t *flags = flags_from_maildir_name(names[i]->d_name);
                    rc = append_one(opts, user, folder, o, buf_cstr(&msg), msg.len, flags,
                                    (long long)st.st_mtime, false);
                    json_decref(flags);
                    if (rc == CTL_OK)
                        (*count)++;
                } else {
                    fprintf(stderr, "petrelctl: cannot read %s: %s\n", file, strerror(errno));
                    rc = CTL_USAGE;
                }
                if (in != NULL)
                    fclose(in);
                buf_free(&msg);
                free(file);
            }
            free(names[i]);
        }
        free(names);
        free(path);
    }
    return rc;
}

/* The empty line an mbox puts after each message (RFC 4155) is not part of
 * the message: the length without it. */
static size_t mbox_message_len(const struct buf *msg)
{
    const char *d = msg->data;
    size_t n = msg->len;
    if ((n == 1 && d[0] == '\n') || (n == 2 && d[0] == '\r' && d[1] == '\n'))
        return 0; /* nothing but that line */
    if (n >= 2 && d[n - 1] == '\n' && d[n - 2] == '\n')
        return n - 1;
    if (n >= 3 && d[n - 1] == '\n' && d[n - 2] == '\r' && d[n - 3] == '\n')
        return n - 2;
    return n;
}

/* mbox (mboxo/mboxrd): messages start at "From " lines; ">From " quoting
 * of body lines is undone (one level). */
static int import_mbox(const struct ctl_options *opts, const char *user, const char *folder,
                       const struct options *o, FILE *in, size_t *count)
{
    struct buf msg = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bool in_message = false;
    int rc = CTL_OK;
    while (rc == CTL_OK && (len = getline(&line, &cap, in)) != -1) {
        if (strncmp(line, "From ", 5) == 0) {
            if (in_message && mbox_message_len(&msg) > 0) {
                rc = append_one(opts, user, folder, o, msg.data, mbox_message_len(&msg),
                                o->flags, 0, false);
                if (rc == CTL_OK)
                    (*count)++;
            }
            buf_reset(&msg);
            in_message = true;
            continue;
        }
        if (!in_message)
            continue;
        const char *p = line;
        size_t n = (size_t)len;
        if (p[0] == '>') {
            size_t q = 0;
            while (q < n && p[q] == '>')
                q++;
            if (n - q >= 5 && strncmp(p + q, "From ", 5) == 0) {
                p++;
                n--;
            }
        }
        buf_append(&msg, p, n);
    }
    if (rc == CTL_OK && in_message && mbox_message_len(&msg) > 0) {
        rc = append_one(opts, user, folder, o, msg.data, mbox_message_len(&msg), o->flags, 0,
                        false);
        if (rc == CTL_OK)
            (*count)++;
    }
    free(line);
    buf_free(&msg);
    return rc;
}

static int cmd_mail(const struct ctl_options *opts, int argc, char **argv)
{
    struct options o;
    memset(&o, 0, sizeof(o));
    if (argc < 2) {
        usage_area("mail");
        return CTL_USAGE;
    }
    const char *cmd = argv[1];
    int n = parse_options(argc - 2, argv + 2, &o);
    char **pos = argv + 2;
    int rc = CTL_USAGE;
    if (n != 3) {
        usage_area("mail");
    } else if (strcmp(cmd, "append") == 0) {
        FILE *in = strcmp(pos[2], "-") == 0 ? stdin : fopen(pos[2], "rb");
        struct buf msg = {0};
        if (in == NULL || !buf_append_stream(&msg, in)) {
            fprintf(stderr, "petrelctl: cannot read %s: %s\n", pos[2], strerror(errno));
        } else {
            rc = append_one(opts, pos[0], pos[1], &o, buf_cstr(&msg), msg.len, o.flags,
                            o.internal_date, true);
        }
        if (in != NULL && in != stdin)
            fclose(in);
        buf_free(&msg);
    } else if (strcmp(cmd, "import") == 0) {
        struct stat st;
        size_t count = 0;
        if (stat(pos[2], &st) != 0) {
            fprintf(stderr, "petrelctl: %s: %s\n", pos[2], strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            rc = import_maildir(opts, pos[0], pos[1], &o, pos[2], &count);
        } else {
            FILE *in = fopen(pos[2], "rb");
            if (in == NULL) {
                fprintf(stderr, "petrelctl: %s: %s\n", pos[2], strerror(errno));
            } else {
                rc = import_mbox(opts, pos[0], pos[1], &o, in, &count);
                fclose(in);
            }
        }
        if ((rc == CTL_OK || count > 0) && opts->json)
            printf("{\"imported\":%zu}\n", count);
        else if (rc == CTL_OK || count > 0)
            printf("imported: %zu\n", count);
    } else {
        usage_area("mail");
    }
    json_decref(o.flags);
    json_decref(o.uids);
    return rc;
}

int ctl_backend_storage(const struct ctl_options *opts, int argc, char **argv)
{
    const char *area = argv[0];
    if (strcmp(area, "mail") == 0)
        return cmd_mail(opts, argc, argv);
    if (argc < 2) {
        usage_area(area);
        return CTL_USAGE;
    }
    const struct command *c = NULL;
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(commands[i].area, area) == 0 && strcmp(commands[i].name, argv[1]) == 0)
            c = &commands[i];
    }
    if (c == NULL) {
        usage_area(area);
        return CTL_USAGE;
    }
    struct options o;
    memset(&o, 0, sizeof(o));
    int n = parse_options(argc - 2, argv + 2, &o);
    size_t want = 0;
    while (want < MAX_POSITIONAL && c->fields[want] != NULL)
        want++;
    if (n < 0 || (size_t)n != want) {
        fprintf(stderr, "usage: petrelctl backend %s %s %s\n", c->area, c->name, c->usage);
        json_decref(o.uids);
        json_decref(o.flags);
        return CTL_USAGE;
    }
    json_t *body = json_object();
    for (size_t i = 0; i < want; i++)
        json_object_set_new(body, c->fields[i], json_string(argv[2 + i]));
    if (o.ns != NULL)
        json_object_set_new(body, "namespace", json_string(o.ns));
    if (o.special_use != NULL)
        json_object_set_new(body, "special_use", json_string(o.special_use));
    if (o.limit > 0)
        json_object_set_new(body, "limit", json_integer(o.limit));
    if (o.reset_uids)
        json_object_set_new(body, "reset_uids", json_true());
    if (o.apply)
        json_object_set_new(body, "apply", json_true());
    if (o.uids != NULL)
        json_object_set_new(body, "uids", o.uids);
    json_decref(o.flags);
    return ctl_backend_post(opts, c->path, body);
}
