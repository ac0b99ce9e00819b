/* petrelctl backend acl get|set|delete|apply|materialise|rebuild|
 * registry list|registry rebuild|my-rights|list-rights: the
 * /api/backend/acl/ endpoints. A folder argument may be
 * replaced by --root (the namespace root); set and delete of a single
 * identifier go through acl/apply (replace; delete = empty rights), as
 * document 1 asks. */
#include "ctl/ctl.h"

#include <stdio.h>
#include <string.h>

#define MAX_ARGS 64

struct acl_args {
    const char *ns;
    const char *mode;
    bool root;
    bool apply;
    bool all;
    bool dry_run;
    const char *pos[MAX_ARGS];
    int count;
};

static void usage(void)
{
    fprintf(
        stderr,
        "usage: petrelctl backend acl <command> ...\n"
        "  get          <user> <folder|--root>\n"
        "  set          <user> <folder|--root> <identifier> <rights>\n"
        "  delete       <user> <folder|--root> <identifier>\n"
        "  apply        <user> <folder|--root> <identifier> <rights> [--mode add|remove|replace]\n"
        "  materialise  <user> <folder>... [--apply]   (a dry run without --apply)\n"
        "  rebuild      <user> <folder>...|--all [--root] [--dry-run]   (reseed the ACL list "
        "index)\n"
        "  registry list     <user>     (owners the user may discover: user and anyone grants)\n"
        "  registry rebuild  <owner>    (the owner's registry keys from their index)\n"
        "  my-rights    <user> <folder|--root> <identifier>\n"
        "  list-rights  <user> <folder|--root> <identifier>\n"
        "identifiers: anyone, authenticated, owner, user=NAME, group=NAME; a leading - is "
        "negative\ncommon option: --namespace NS (default personal)\n");
}

static bool parse(int argc, char **argv, struct acl_args *a)
{
    memset(a, 0, sizeof(*a));
    for (int i = 0; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--namespace") == 0 && next != NULL) {
            a->ns = next;
            i++;
        } else if (strcmp(argv[i], "--mode") == 0 && next != NULL) {
            a->mode = next;
            i++;
        } else if (strcmp(argv[i], "--root") == 0) {
            a->root = true;
        } else if (strcmp(argv[i], "--apply") == 0) {
            a->apply = true;
        } else if (strcmp(argv[i], "--all") == 0) {
            a->all = true;
        } else if (strcmp(argv[i], "--dry-run") == 0) {
            a->dry_run = true;
        } else if (strncmp(argv[i], "--", 2) == 0 && argv[i][2] != '\0') {
            fprintf(stderr, "petrelctl: unknown option %s\n", argv[i]);
            return false;
        } else if (a->count < MAX_ARGS) {
            a->pos[a->count++] = argv[i];
        } else {
            return false;
        }
    }
    return true;
}

/* The addressing fields: user, then a folder unless --root. Returns the
 * index of the next positional, or -1 when they are missing. */
static int address(const struct acl_args *a, json_t *body)
{
    if (a->count < 1)
        return -1;
    json_object_set_new(body, "user", json_string(a->pos[0]));
    if (a->ns != NULL)
        json_object_set_new(body, "namespace", json_string(a->ns));
    if (a->root) {
        json_object_set_new(body, "root", json_true());
        return 1;
    }
    if (a->count < 2)
        return -1;
    json_object_set_new(body, "folder", json_string(a->pos[1]));
    return 2;
}

int ctl_backend_acl(const struct ctl_options *opts, int argc, char **argv)
{
    struct acl_args a;
    if (argc < 2 || !parse(argc - 2, argv + 2, &a)) {
        usage();
        return CTL_USAGE;
    }
    const char *cmd = argv[1];
    json_t *body = json_object();
    bool whole = strcmp(cmd, "materialise") == 0 || strcmp(cmd, "rebuild") == 0 ||
                 strcmp(cmd, "registry") == 0;
    int next = whole ? 0 : address(&a, body);
    int rest = next < 0 ? -1 : a.count - next;
    const char *path = NULL;
    if (strcmp(cmd, "get") == 0 && rest == 0) {
        path = "/api/backend/acl/get";
    } else if ((strcmp(cmd, "set") == 0 || strcmp(cmd, "apply") == 0) && rest == 2) {
        path = "/api/backend/acl/apply";
        json_object_set_new(body, "identifier", json_string(a.pos[next]));
        json_object_set_new(body, "rights", json_string(a.pos[next + 1]));
        json_object_set_new(
            body, "mode",
            json_string(strcmp(cmd, "apply") == 0 && a.mode != NULL ? a.mode : "replace"));
    } else if (strcmp(cmd, "delete") == 0 && rest == 1) {
        path = "/api/backend/acl/apply";
        json_object_set_new(body, "identifier", json_string(a.pos[next]));
        json_object_set_new(body, "rights", json_string(""));
        json_object_set_new(body, "mode", json_string("replace"));
    } else if ((strcmp(cmd, "my-rights") == 0 || strcmp(cmd, "list-rights") == 0) && rest == 1) {
        path = strcmp(cmd, "my-rights") == 0 ? "/api/backend/acl/my-rights"
                                             : "/api/backend/acl/list-rights";
        json_object_set_new(body, "identifier", json_string(a.pos[next]));
    } else if (strcmp(cmd, "materialise") == 0 && a.count >= 2 && !a.root) {
        path = "/api/backend/acl/materialise";
        json_object_set_new(body, "user", json_string(a.pos[0]));
        if (a.ns != NULL)
            json_object_set_new(body, "namespace", json_string(a.ns));
        json_t *folders = json_array();
        for (int i = 1; i < a.count; i++)
            json_array_append_new(folders, json_string(a.pos[i]));
        json_object_set_new(body, "folders", folders);
        json_object_set_new(body, "apply", json_boolean(a.apply));
    } else if (strcmp(cmd, "rebuild") == 0 && a.count >= 1 && (a.all || a.count >= 2 || a.root)) {
        path = "/api/backend/acl/rebuild";
        json_object_set_new(body, "user", json_string(a.pos[0]));
        if (a.ns != NULL)
            json_object_set_new(body, "namespace", json_string(a.ns));
        if (a.all) {
            json_object_set_new(body, "all", json_true());
        }
        if (!a.all || a.count >= 2 || a.root) {
            /* --all with names is sent as is: the server answers 400 */
            json_t *folders = json_array();
            if (a.root)
                json_array_append_new(folders, json_string(""));
            for (int i = 1; i < a.count; i++)
                json_array_append_new(folders, json_string(a.pos[i]));
            json_object_set_new(body, "folders", folders);
        }
        json_object_set_new(body, "dry_run", json_boolean(a.dry_run));
    } else if (strcmp(cmd, "registry") == 0 && a.count == 2 && strcmp(a.pos[0], "list") == 0) {
        path = "/api/backend/acl/registry/list";
        json_object_set_new(body, "user", json_string(a.pos[1]));
    } else if (strcmp(cmd, "registry") == 0 && a.count == 2 && strcmp(a.pos[0], "rebuild") == 0) {
        path = "/api/backend/acl/registry/rebuild";
        json_object_set_new(body, "owner", json_string(a.pos[1]));
        json_object_set_new(body, "namespace", json_string(a.ns != NULL ? a.ns : "personal"));
    }
    if (path == NULL) {
        json_decref(body);
        usage();
        return CTL_USAGE;
    }
    return ctl_backend_post(opts, path, body);
}
