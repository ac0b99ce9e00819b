/* petrelctl backend metadata list|get|set|delete (RFC 5464 entries through
 * /api/backend/metadata/...). Values are bytes: printed raw (get: the
 * value alone; list: "entry<TAB>value" lines), or as the API's JSON with
 * base64 values under --json. A value to set comes from the argument, from
 * a file (--file PATH) or from stdin (the argument "-"). */
#include "ctl/ctl.h"

#include "core/base64.h"
#include "core/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct md_args {
    const char *ns;
    const char *scope;
    const char *as_user;
    const char *file;
    const char *pos[5];
    int npos;
};

static int usage(void)
{
    fprintf(stderr,
            "usage: petrelctl backend metadata <command> ...\n"
            "  list <user> <folder> --scope private|shared   every entry of the scope\n"
            "  get <user> <folder> <entry>                   the value (exit 1 when absent)\n"
            "  set <user> <folder> <entry> <value|->         value from the argument or stdin\n"
            "  set <user> <folder> <entry> --file PATH       value from a file\n"
            "  delete <user> <folder> <entry>\n"
            "folder \"\" addresses the server's entries; options: --namespace NS,\n"
            "--as-user U (whose /private entries), --json (the API's reply, values base64)\n");
    return CTL_USAGE;
}

static bool parse(int argc, char **argv, struct md_args *a)
{
    memset(a, 0, sizeof(*a));
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--namespace") == 0 && next != NULL) {
            a->ns = argv[++i];
        } else if (strcmp(argv[i], "--scope") == 0 && next != NULL) {
            a->scope = argv[++i];
        } else if (strcmp(argv[i], "--as-user") == 0 && next != NULL) {
            a->as_user = argv[++i];
        } else if (strcmp(argv[i], "--file") == 0 && next != NULL) {
            a->file = argv[++i];
        } else if (strncmp(argv[i], "--", 2) == 0) {
            fprintf(stderr, "petrelctl: unknown option %s\n", argv[i]);
            return false;
        } else if (a->npos < 5) {
            a->pos[a->npos++] = argv[i];
        } else {
            return false;
        }
    }
    return true;
}

/* The value to set, from --file, stdin ("-") or the argument. */
static bool value_of(const struct md_args *a, struct buf *out)
{
    if (a->file != NULL) {
        FILE *f = fopen(a->file, "rb");
        if (f == NULL) {
            fprintf(stderr, "petrelctl: cannot open %s\n", a->file);
            return false;
        }
        bool ok = buf_append_stream(out, f);
        fclose(f);
        if (!ok)
            fprintf(stderr, "petrelctl: cannot read %s\n", a->file);
        return ok;
    }
    if (a->npos == 4 && strcmp(a->pos[3], "-") == 0) {
        if (!buf_append_stream(out, stdin)) {
            fprintf(stderr, "petrelctl: cannot read stdin\n");
            return false;
        }
        return true;
    }
    if (a->npos == 4) {
        buf_append(out, a->pos[3], strlen(a->pos[3]));
        return true;
    }
    return false;
}

static void print_raw_b64(const char *b64)
{
    struct buf raw = {0};
    if (b64 != NULL && base64_decode_append(&raw, b64, strlen(b64)))
        fwrite(raw.data != NULL ? raw.data : "", 1, raw.len, stdout);
    buf_free(&raw);
}

/* Readable output of list and get; the others print as every command. */
static int print(const struct ctl_options *opts, const char *cmd, struct ctl_response *resp)
{
    if (opts->json || resp->status != 200 || (strcmp(cmd, "list") != 0 && strcmp(cmd, "get") != 0))
        return ctl_print_reply(opts, resp);
    json_t *reply = json_loadb(resp->body, resp->len, 0, NULL);
    if (reply == NULL)
        return ctl_print_reply(opts, resp);
    int rc = CTL_OK;
    if (strcmp(cmd, "get") == 0) {
        if (json_is_true(json_object_get(reply, "found")))
            print_raw_b64(json_string_value(json_object_get(reply, "value")));
        else
            rc = CTL_REFUSED;
    } else {
        size_t i;
        json_t *row;
        json_array_foreach(json_object_get(reply, "entries"), i, row)
        {
            const char *entry = json_string_value(json_object_get(row, "entry"));
            fputs(entry != NULL ? entry : "", stdout);
            fputc('\t', stdout);
            print_raw_b64(json_string_value(json_object_get(row, "value")));
            fputc('\n', stdout);
        }
    }
    json_decref(reply);
    return rc;
}

int ctl_backend_metadata(const struct ctl_options *opts, int argc, char **argv)
{
    struct md_args a;
    if (argc < 2 || !parse(argc, argv, &a) || a.npos < 1)
        return usage();
    const char *cmd = a.pos[0];
    bool list = strcmp(cmd, "list") == 0;
    bool set = strcmp(cmd, "set") == 0;
    if (!list && !set && strcmp(cmd, "get") != 0 && strcmp(cmd, "delete") != 0)
        return usage();
    if ((list && (a.npos != 3 || a.scope == NULL)) ||
        (set && (a.file != NULL ? a.npos != 4 : a.npos != 5)) || (!list && !set && a.npos != 4))
        return usage();
    /* positional: command, user, folder, entry, value */
    json_t *body = json_pack("{s:s, s:s}", "user", a.pos[1], "folder", a.pos[2]);
    if (a.ns != NULL)
        json_object_set_new(body, "namespace", json_string(a.ns));
    if (a.as_user != NULL)
        json_object_set_new(body, "as_user", json_string(a.as_user));
    if (list)
        json_object_set_new(body, "scope", json_string(a.scope));
    else
        json_object_set_new(body, "entry", json_string(a.pos[3]));
    if (set) {
        struct md_args v = a;
        /* value_of() reads pos[3] as the value: shift past the entry */
        v.pos[3] = a.npos == 5 ? a.pos[4] : NULL;
        v.npos = a.npos == 5 ? 4 : 3;
        struct buf value = {0}, b64 = {0};
        if (!value_of(&v, &value)) {
            buf_free(&value);
            json_decref(body);
            return a.file != NULL ? CTL_REFUSED : usage();
        }
        base64_encode_append(&b64, value.data != NULL ? value.data : "", value.len);
        json_object_set_new(body, "value", json_string(b64.data != NULL ? b64.data : ""));
        buf_free(&value);
        buf_free(&b64);
    }
    char path[64];
    snprintf(path, sizeof(path), "/api/backend/metadata/%s", cmd);
    struct ctl_response resp;
    enum ctl_exit rc = ctl_post_json(&opts->backend, path, body, &resp);
    if (rc != CTL_OK)
        return rc;
    rc = print(opts, cmd, &resp);
    ctl_response_free(&resp);
    return rc;
}
