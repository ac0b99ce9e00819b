/* petrelctl backend dict drivers|exists|get|iterate|set|unset|inc|expire|batch */
#include "ctl/ctl.h"

#include "core/base64.h"
#include "core/buf.h"
#include "core/slice.h"
#include "core/xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dict_args {
    const char *user;
    const char *home;
    int64_t expire;
    bool base64;
    unsigned flags;
};

static void dict_usage(void)
{
    fprintf(stderr,
            "usage: petrelctl backend dict <command> [options] ...\n"
            "  drivers                           registered drivers\n"
            "  exists <dict>                     is the dict configured here\n"
            "  get <dict> <key>                  print the value(s); exit 1 when absent\n"
            "  iterate <dict> <path>             print key<TAB>value rows as they arrive\n"
            "      [--recurse] [--sort-key|--sort-value] [--no-value] [--exact]\n"
            "  set <dict> <key> <value>          [--expire SECS]\n"
            "  unset <dict> <key>\n"
            "  inc <dict> <key> <delta>          atomic increment (exit 1 when the key is missing)\n"
            "  expire <dict>                     remove expired keys now\n"
            "  batch <dict> [FILE|-]             one transaction from lines:\n"
            "                                    set KEY VALUE | unset KEY | inc KEY DELTA\n"
            "options for every command: --user U (priv/ keys), --home DIR, --base64 (values\n"
            "given and printed as base64 instead of text)\n");
}

/* Parses options anywhere after the command word; leaves positionals in argv. */
static int parse_args(int argc, char **argv, struct dict_args *a)
{
    memset(a, 0, sizeof(*a));
    const struct ctl_option options[] = {
        {"user", .text = &a->user},
        {"home", .text = &a->home},
        {"expire", .number = &a->expire, .min = 1, .max = INT64_MAX,
         .bad = "--expire needs a positive number of seconds"},
        {"base64", .flag = &a->base64},
        {"recurse", .bits = &a->flags, .bit = 1},
        {"sort-key", .bits = &a->flags, .bit = 2},
        {"sort-value", .bits = &a->flags, .bit = 4},
        {"no-value", .bits = &a->flags, .bit = 8},
        {"exact", .bits = &a->flags, .bit = 16},
    };
    return ctl_parse_options(argc, argv, options, sizeof(options) / sizeof(options[0]));
}

static json_t *op_object(const struct dict_args *a)
{
    json_t *op = json_object();
    if (a->user != NULL)
        json_object_set_new(op, "username", json_string(a->user));
    if (a->home != NULL)
        json_object_set_new(op, "home_dir", json_string(a->home));
    if (a->expire > 0)
        json_object_set_new(op, "expire_secs", json_integer(a->expire));
    return op;
}

/* The value as the API wants it: base64 of the text, or given as base64. */
static json_t *value_json(const struct dict_args *a, const char *value)
{
    if (a->base64)
        return json_string(value);
    struct buf b = {0};
    base64_encode_append(&b, value, strlen(value));
    json_t *s = json_string(buf_cstr(&b));
    buf_free(&b);
    return s;
}

static char *dict_path(const char *dict, const char *action)
{
    char *escaped = ctl_escape(dict);
    char *path = xasprintf("/api/backend/dict/%s/%s", escaped, action);
    free(escaped);
    return path;
}

/* POSTs `body` (stolen) and returns the exit code; *reply gets the parsed
 * JSON on 2xx (caller decrefs) when non-NULL, else the reply is printed. */
static int post(const struct ctl_options *opts, const char *path, json_t *body, json_t **reply)
{
    struct ctl_response resp;
    enum ctl_exit rc = ctl_post_json(&opts->backend, path, body, &resp);
    if (rc != CTL_OK)
        return rc;
    if (reply == NULL || resp.status < 200 || resp.status >= 300) {
        rc = ctl_print_reply(opts, &resp);
        ctl_response_free(&resp);
        return rc;
    }
    json_error_t jerr;
    *reply = json_loadb(resp.body, resp.len, 0, &jerr);
    if (*reply == NULL) {
        fprintf(stderr, "petrelctl: unreadable reply: %s\n", jerr.text);
        ctl_response_free(&resp);
        return CTL_REFUSED;
    }
    if (opts->json) {
        fwrite(resp.body, 1, resp.len, stdout);
        putchar('\n');
    }
    ctl_response_free(&resp);
    return CTL_OK;
}

static void print_value(const struct dict_args *a, const char *b64)
{
    if (a->base64) {
        fputs(b64, stdout);
        return;
    }
    struct buf raw = {0};
    if (base64_decode_append(&raw, b64, strlen(b64)))
        fwrite(raw.data != NULL ? raw.data : "", 1, raw.len, stdout);
    else
        fputs(b64, stdout);
    buf_free(&raw);
}

static int cmd_get(const struct ctl_options *opts, const struct dict_args *a, char **pos, int n)
{
    if (n != 2) {
        dict_usage();
        return CTL_USAGE;
    }
    char *path = dict_path(pos[0], "lookup");
    json_t *reply = NULL;
    int rc = post(opts, path, json_pack("{s:s, s:o}", "key", pos[1], "op", op_object(a)), &reply);
    free(path);
    if (rc != CTL_OK || opts->json) {
        json_decref(reply);
        return rc;
    }
    if (!json_is_true(json_object_get(reply, "found"))) {
        fprintf(stderr, "petrelctl: %s: not found\n", pos[1]);
        json_decref(reply);
        return CTL_REFUSED;
    }
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(reply, "values"), i, v)
    {
        print_value(a, json_string_value(v) != NULL ? json_string_value(v) : "");
        putchar('\n');
    }
    json_decref(reply);
    return CTL_OK;
}

struct iterate_state {
    const struct ctl_options *opts;
    const struct dict_args *args;
    size_t rows;
    bool failed;
};

static bool on_row(const char *line, size_t len, void *ctx)
{
    struct iterate_state *st = ctx;
    if (len == 0)
        return true;
    json_error_t jerr;
    json_t *row = json_loadb(line, len, 0, &jerr);
    if (row == NULL) {
        fprintf(stderr, "petrelctl: unreadable row: %s\n", jerr.text);
        st->failed = true;
        return false;
    }
    json_t *error = json_object_get(row, "error");
    if (error != NULL) {
        fprintf(stderr, "petrelctl: iterate failed after %zu rows: %s\n", st->rows,
                json_string_value(error) != NULL ? json_string_value(error) : "?");
        st->failed = true;
    } else if (st->opts->json) {
        fwrite(line, 1, len, stdout);
        putchar('\n');
        st->rows++;
    } else {
        fputs(json_string_value(json_object_get(row, "key")) != NULL
                  ? json_string_value(json_object_get(row, "key"))
                  : "",
              stdout);
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(row, "values"), i, v)
        {
            putchar('\t');
            print_value(st->args, json_string_value(v) != NULL ? json_string_value(v) : "");
        }
        putchar('\n');
        st->rows++;
    }
    fflush(stdout);
    json_decref(row);
    return !st->failed;
}

static int cmd_iterate(const struct ctl_options *opts, const struct dict_args *a, char **pos,
                       int n)
{
    if (n != 2) {
        dict_usage();
        return CTL_USAGE;
    }
    char *path = dict_path(pos[0], "iterate");
    json_t *body = json_pack("{s:s, s:i, s:o}", "path", pos[1], "flags", (int)a->flags, "op",
                             op_object(a));
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    struct iterate_state st = {.opts = opts, .args = a};
    long status = 0;
    /* An error reply (4xx/5xx) is one JSON object: on_row reports its "error". */
    enum ctl_exit rc = ctl_http_stream(&opts->backend, "POST", path, text, on_row, &st, &status);
    free(text);
    free(path);
    if (rc != CTL_OK)
        return rc;
    if (status < 200 || status >= 300 || st.failed)
        return CTL_REFUSED;
    return CTL_OK;
}

static int print_result(const struct ctl_options *opts, json_t *reply)
{
    int result = (int)json_integer_value(json_object_get(reply, "result"));
    const char *status = json_string_value(json_object_get(reply, "status"));
    if (!opts->json)
        printf("%s\n", status != NULL ? status : "?");
    json_decref(reply);
    return result == 1 ? CTL_OK : CTL_REFUSED;
}

static int cmd_write(const struct ctl_options *opts, const struct dict_args *a, char **pos, int n,
                     const char *action)
{
    json_t *body;
    if (strcmp(action, "set") == 0 && n == 3) {
        body = json_pack("{s:s, s:o, s:o}", "key", pos[1], "value", value_json(a, pos[2]), "op",
                         op_object(a));
    } else if (strcmp(action, "unset") == 0 && n == 2) {
        body = json_pack("{s:s, s:o}", "key", pos[1], "op", op_object(a));
    } else if (strcmp(action, "atomic-inc") == 0 && n == 3) {
        int64_t delta = 0;
        if (!str_parse_i64(pos[2], INT64_MIN, INT64_MAX, &delta)) {
            fprintf(stderr, "petrelctl: delta must be an integer\n");
            return CTL_USAGE;
        }
        body = json_pack("{s:s, s:I, s:o}", "key", pos[1], "delta", (json_int_t)delta, "op",
                         op_object(a));
    } else {
        dict_usage();
        return CTL_USAGE;
    }
    char *path = dict_path(pos[0], action);
    json_t *reply = NULL;
    int rc = post(opts, path, body, &reply);
    free(path);
    if (rc != CTL_OK)
        return rc;
    return print_result(opts, reply);
}

/* Reads "set KEY VALUE", "unset KEY", "inc KEY DELTA" lines into ops. */
static int read_batch(FILE *in, const struct dict_args *a, json_t *ops)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    while ((len = getline(&line, &cap, in)) != -1) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        char *kind = strsep(&p, " \t");
        char *key = p != NULL ? strsep(&p, " \t") : NULL;
        char *rest = p;
        json_t *op = NULL;
        if (key == NULL || *key == '\0') {
            op = NULL;
        } else if (strcmp(kind, "set") == 0 && rest != NULL) {
            op = json_pack("{s:s, s:s, s:o}", "kind", "set", "key", key, "value",
                           value_json(a, rest));
        } else if (strcmp(kind, "unset") == 0 && rest == NULL) {
            op = json_pack("{s:s, s:s}", "kind", "unset", "key", key);
        } else if (strcmp(kind, "inc") == 0 && rest != NULL) {
            int64_t delta = 0;
            if (str_parse_i64(rest, INT64_MIN, INT64_MAX, &delta))
                op = json_pack("{s:s, s:s, s:I}", "kind", "atomic-inc", "key", key, "delta",
                               (json_int_t)delta);
        }
        if (op == NULL) {
            fprintf(stderr, "petrelctl: batch line %d: expected set KEY VALUE | unset KEY | "
                            "inc KEY DELTA\n",
                    lineno);
            free(line);
            return CTL_USAGE;
        }
        json_array_append_new(ops, op);
    }
    free(line);
    return CTL_OK;
}

static int cmd_batch(const struct ctl_options *opts, const struct dict_args *a, char **pos, int n)
{
    if (n < 1 || n > 2) {
        dict_usage();
        return CTL_USAGE;
    }
    FILE *in = stdin;
    if (n == 2 && strcmp(pos[1], "-") != 0) {
        in = fopen(pos[1], "r");
        if (in == NULL) {
            fprintf(stderr, "petrelctl: %s: %s\n", pos[1], strerror(errno));
            return CTL_USAGE;
        }
    }
    json_t *ops = json_array();
    int rc = read_batch(in, a, ops);
    if (in != stdin)
        fclose(in);
    if (rc != CTL_OK) {
        json_decref(ops);
        return rc;
    }
    char *path = dict_path(pos[0], "commit-batch");
    json_t *reply = NULL;
    rc = post(opts, path, json_pack("{s:o, s:o}", "ops", ops, "op", op_object(a)), &reply);
    free(path);
    if (rc != CTL_OK)
        return rc;
    return print_result(opts, reply);
}

int ctl_backend_dict(const struct ctl_options *opts, int argc, char **argv)
{
    /* argv[0] is "dict", argv[1] the command. */
    if (argc < 2) {
        dict_usage();
        return CTL_USAGE;
    }
    const char *cmd = argv[1];
    struct dict_args a;
    int first = parse_args(argc - 1, argv + 1, &a);
    if (first < 0) {
        dict_usage();
        return CTL_USAGE;
    }
    char **pos = argv + 1 + first;
    int n = argc - 1 - first;
    if (strcmp(cmd, "drivers") == 0 && n == 0)
        return ctl_backend_call(opts, "GET", "/api/backend/dict/drivers", NULL);
    if (strcmp(cmd, "exists") == 0 && n == 1) {
        char *path = dict_path(pos[0], "exists");
        int rc = ctl_backend_call(opts, "GET", path, NULL);
        free(path);
        return rc;
    }
    if (strcmp(cmd, "get") == 0)
        return cmd_get(opts, &a, pos, n);
    if (strcmp(cmd, "iterate") == 0)
        return cmd_iterate(opts, &a, pos, n);
    if (strcmp(cmd, "set") == 0)
        return cmd_write(opts, &a, pos, n, "set");
    if (strcmp(cmd, "unset") == 0)
        return cmd_write(opts, &a, pos, n, "unset");
    if (strcmp(cmd, "inc") == 0)
        return cmd_write(opts, &a, pos, n, "atomic-inc");
    if (strcmp(cmd, "batch") == 0)
        return cmd_batch(opts, &a, pos, n);
    if (strcmp(cmd, "expire") == 0 && n == 1) {
        char *path = dict_path(pos[0], "expire-scan");
        int rc = ctl_backend_call(opts, "POST", path, "{}");
        free(path);
        return rc;
    }
    dict_usage();
    return CTL_USAGE;
}
