/* The monitor file and petrel.yaml's `monitor:` section (monitor-config.h). */
#include "services/monitor/monitor-config.h"

#include "core/xalloc.h"
#include "core/yaml-doc.h"
#include "core/yaml-print.h"
#include "net/endpoint.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

void monitor_config_defaults(struct monitor_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->director_addr = xstrdup("127.0.0.1:9102");
    cfg->director_secret_file = xstrdup("");
    cfg->director_secret_env = xstrdup("DIRECTOR_RING_SECRET");
    cfg->poll_imap = true;
    cfg->imap_port = 993;
    cfg->imap_tls = true;
    cfg->poll_pop3 = false;
    cfg->pop3_port = 110;
    cfg->pop3_tls = false;
    cfg->poll_lmtp = false;
    cfg->lmtp_port = 24;
    cfg->interval_ms = 10 * 1000;
    cfg->timeout_ms = 3 * 1000;
    cfg->rapid_interval_ms = 1000;
    cfg->retry_count = 3;
    cfg->rapid_rounds = 10;
    cfg->rapid_fails_needed = 7;
    cfg->restore = MONITOR_RESTORE_ANY;
    cfg->max_backends = 10000;
    cfg->max_line_length = 64 * 1024;
    cfg->reconnect_min_ms = 200;
    cfg->reconnect_max_ms = 10 * 1000;
    cfg->ping_interval_ms = 30 * 1000;
}

static void free_tags(struct monitor_config *cfg)
{
    for (size_t i = 0; i < cfg->tag_count; i++) {
        free(cfg->tags[i].tag);
        free(cfg->tags[i].user);
        if (cfg->tags[i].password != NULL) {
            /* Not left lying around in freed heap memory. */
            volatile char *p = cfg->tags[i].password;
            while (*p != '\0')
                *p++ = '\0';
            free(cfg->tags[i].password);
        }
    }
    free(cfg->tags);
    cfg->tags = NULL;
    cfg->tag_count = 0;
}

void monitor_config_free(struct monitor_config *cfg)
{
    free(cfg->config_file);
    free(cfg->file);
    free(cfg->director_addr);
    free(cfg->director_secret_file);
    free(cfg->director_secret_env);
    free(cfg->tls_ca_file);
    free_tags(cfg);
    memset(cfg, 0, sizeof(*cfg));
}

bool monitor_section_read(const struct cfg_ctx *ctx, const struct ynode *node,
                          struct monitor_config *cfg)
{
    static const char *const keys[] = {"config_file", NULL};
    if (!cfg_expect_map(ctx, node, "monitor") || !cfg_check_keys(ctx, node, "monitor", keys) ||
        !cfg_string(ctx, node, "monitor", "config_file", &cfg->config_file))
        return false;
    if (cfg->config_file != NULL && cfg->config_file[0] == '\0') {
        free(cfg->config_file);
        cfg->config_file = NULL; /* empty: as if absent */
    }
    return true;
}

const char *monitor_config_path(const struct monitor_config *cfg)
{
    const char *env = getenv(MONITOR_CONFIG_ENV);
    if (env != NULL && *env != '\0')
        return env;
    if (cfg->config_file != NULL)
        return cfg->config_file;
    return MONITOR_CONFIG_DEFAULT_FILE;
}

/* ---------- the monitor file ---------- */

static bool check_text(const struct cfg_ctx *ctx, const struct ynode *n, const char *path,
                       const char *value)
{
    if (strlen(value) > MONITOR_MAX_CREDENTIAL_LEN)
        return cfg_fail(ctx, n, path, "longer than %d bytes", MONITOR_MAX_CREDENTIAL_LEN);
    for (const char *p = value; *p != '\0'; p++) {
        if (*p == '\r' || *p == '\n')
            return cfg_fail(ctx, n, path, "must not contain CR or LF");
    }
    return true;
}

static bool read_credentials(const struct cfg_ctx *ctx, const struct ynode *entry, const char *path,
                             struct monitor_credentials *c)
{
    static const char *const keys[] = {"user", "password", NULL};
    if (entry->type != YNODE_MAP)
        return cfg_fail(ctx, entry, path, "expected a mapping with user and password, found %s",
                        entry->type == YNODE_SCALAR ? "a scalar" : "a list");
    if (!cfg_check_keys(ctx, entry, path, keys) ||
        !cfg_string(ctx, entry, path, "user", &c->user) ||
        !cfg_string(ctx, entry, path, "password", &c->password))
        return false;
    if (c->user == NULL || c->user[0] == '\0')
        return cfg_fail(ctx, entry, path, "user is required");
    if (c->password == NULL)
        return cfg_fail(ctx, entry, path, "password is required");
    char *full = xasprintf("%s.user", path);
    bool ok = check_text(ctx, ynode_get(entry, "user"), full, c->user);
    free(full);
    if (!ok)
        return false;
    full = xasprintf("%s.password", path);
    ok = check_text(ctx, ynode_get(entry, "password"), full, c->password);
    free(full);
    return ok;
}

static bool read_tags(const struct cfg_ctx *ctx, const struct ynode *node,
                      struct monitor_config *cfg)
{
    if (node == NULL)
        return true;
    if (!cfg_expect_map(ctx, node, "tags"))
        return false;
    if (node->type != YNODE_MAP)
        return true; /* `tags:` with nothing under it */
    if (node->count > MONITOR_MAX_TAGS)
        return cfg_fail(ctx, node, "tags", "more than %d entries", MONITOR_MAX_TAGS);
    free_tags(cfg);
    cfg->tags = xcalloc(node->count + 1, sizeof(*cfg->tags));
    for (size_t i = 0; i < node->count; i++) {
        const char *tag = node->keys[i];
        char path[320];
        snprintf(path, sizeof(path), "tags.%.*s", MONITOR_MAX_TAG_LEN, tag);
        if (strlen(tag) > MONITOR_MAX_TAG_LEN)
            return cfg_fail(ctx, node->items[i], path, "tag longer than %d bytes",
                            MONITOR_MAX_TAG_LEN);
        for (const char *p = tag; *p != '\0'; p++) {
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                return cfg_fail(ctx, node->items[i], path, "tag contains a control character");
        }
        struct monitor_credentials *c = &cfg->tags[cfg->tag_count++];
        c->tag = xstrdup(tag);
        if (!read_credentials(ctx, node->items[i], path, c))
            return false;
    }
    return true;
}

/* `imap_tls`/`pop3_tls`: the key when given, else whether the port is the
 * protocol's implicit-TLS port. */
static bool read_tls_flag(const struct cfg_ctx *ctx, const struct ynode *root, const char *key,
                          int64_t port, int64_t tls_port, bool *out)
{
    bool set = false;
    bool value = false;
    const struct ynode *n = ynode_get(root, key);
    if (n != NULL) {
        value = port == tls_port;
        if (!cfg_bool(ctx, root, "", key, &value))
            return false;
        set = true;
    }
    *out = set ? value : port == tls_port;
    return true;
}

/* `restore_flushed`, indexed by enum monitor_restore: read and printed. */
static const char *const restore_names[] = {"any", "own", NULL};

static bool read_restore(const struct cfg_ctx *ctx, const struct ynode *root,
                         struct monitor_config *cfg)
{
    int restore = (int)cfg->restore;
    if (!cfg_choice(ctx, root, "", "restore_flushed", restore_names, &restore))
        return false;
    cfg->restore = (enum monitor_restore)restore;
    return true;
}

static bool check_director_addr(const struct cfg_ctx *ctx, const struct ynode *root,
                                const char *addr)
{
    /* Dialed: a host name is resolved at each connect, not here. */
    struct petrel_error e;
    struct net_endpoint ep;
    if (!net_endpoint_parse(addr, NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_PORT_NONZERO, 0, &ep, &e))
        return cfg_fail(ctx, ynode_get(root, "director_addr"), "director_addr", "%s", e.message);
    return true;
}

static bool read_root(const struct cfg_ctx *ctx, const struct ynode *root,
                      struct monitor_config *cfg)
{
    static const char *const keys[] = {"director_addr",
                                       "director_secret_file",
                                       "director_secret_env",
                                       "poll_imap",
                                       "imap_port",
                                       "imap_tls",
                                       "poll_pop3",
                                       "pop3_port",
                                       "pop3_tls",
                                       "poll_lmtp",
                                       "lmtp_port",
                                       "tls_ca_file",
                                       "interval",
                                       "timeout",
                                       "rapid_interval",
                                       "retry_count",
                                       "rapid_rounds",
                                       "rapid_fails_needed",
                                       "restore_flushed",
                                       "max_backends",
                                       "max_line_length",
                                       "reconnect_min",
                                       "reconnect_max",
                                       "ping_interval",
                                       "tags",
                                       NULL};
    if (!cfg_expect_map(ctx, root, "") || !cfg_check_keys(ctx, root, "", keys))
        return false;
    if (!cfg_string(ctx, root, "", "director_addr", &cfg->director_addr) ||
        !check_director_addr(ctx, root, cfg->director_addr) ||
        !cfg_string(ctx, root, "", "director_secret_file", &cfg->director_secret_file) ||
        !cfg_string(ctx, root, "", "director_secret_env", &cfg->director_secret_env) ||
        !cfg_bool(ctx, root, "", "poll_imap", &cfg->poll_imap) ||
        !cfg_int(ctx, root, "", "imap_port", 1, 65535, &cfg->imap_port) ||
        !read_tls_flag(ctx, root, "imap_tls", cfg->imap_port, 993, &cfg->imap_tls) ||
        !cfg_bool(ctx, root, "", "poll_pop3", &cfg->poll_pop3) ||
        !cfg_int(ctx, root, "", "pop3_port", 1, 65535, &cfg->pop3_port) ||
        !read_tls_flag(ctx, root, "pop3_tls", cfg->pop3_port, 995, &cfg->pop3_tls) ||
        !cfg_bool(ctx, root, "", "poll_lmtp", &cfg->poll_lmtp) ||
        !cfg_int(ctx, root, "", "lmtp_port", 1, 65535, &cfg->lmtp_port) ||
        !cfg_string(ctx, root, "", "tls_ca_file", &cfg->tls_ca_file) ||
        !cfg_duration_ms(ctx, root, "", "interval", 10, 24 * 3600 * 1000, &cfg->interval_ms) ||
        !cfg_duration_ms(ctx, root, "", "timeout", 10, 600 * 1000, &cfg->timeout_ms) ||
        !cfg_duration_ms(ctx, root, "", "rapid_interval", 0, 3600 * 1000,
                         &cfg->rapid_interval_ms) ||
        !cfg_int(ctx, root, "", "retry_count", 1, 1000, &cfg->retry_count) ||
        !cfg_int(ctx, root, "", "rapid_rounds", 0, 1000, &cfg->rapid_rounds) ||
        !cfg_int(ctx, root, "", "rapid_fails_needed", 1, 1000, &cfg->rapid_fails_needed) ||
        !read_restore(ctx, root, cfg) ||
        !cfg_int(ctx, root, "", "max_backends", 1, 1000000, &cfg->max_backends) ||
        !cfg_int(ctx, root, "", "max_line_length", 512, 16 * 1024 * 1024, &cfg->max_line_length) ||
        !cfg_duration_ms(ctx, root, "", "reconnect_min", 10, 3600 * 1000, &cfg->reconnect_min_ms) ||
        !cfg_duration_ms(ctx, root, "", "reconnect_max", 10, 3600 * 1000, &cfg->reconnect_max_ms) ||
        !cfg_duration_ms(ctx, root, "", "ping_interval", 100, 3600 * 1000,
                         &cfg->ping_interval_ms) ||
        !read_tags(ctx, ynode_get(root, "tags"), cfg))
        return false;
    if (cfg->tls_ca_file != NULL && cfg->tls_ca_file[0] == '\0') {
        free(cfg->tls_ca_file);
        cfg->tls_ca_file = NULL;
    }
    if (cfg->director_secret_env[0] == '\0')
        return cfg_fail(ctx, ynode_get(root, "director_secret_env"), "director_secret_env",
                        "must name an environment variable");
    if (cfg->rapid_rounds > 0 && cfg->rapid_fails_needed > cfg->rapid_rounds) {
        const struct ynode *n = ynode_get(root, "rapid_fails_needed");
        return cfg_fail(ctx, n != NULL ? n : ynode_get(root, "rapid_rounds"), "rapid_fails_needed",
                        "%lld exceeds rapid_rounds (%lld): no backend could ever be flushed",
                        (long long)cfg->rapid_fails_needed, (long long)cfg->rapid_rounds);
    }
    if (cfg->reconnect_max_ms < cfg->reconnect_min_ms)
        return cfg_fail(ctx, ynode_get(root, "reconnect_max"), "reconnect_max",
                        "shorter than reconnect_min");
    if (!cfg->poll_imap && !cfg->poll_pop3 && !cfg->poll_lmtp)
        return cfg_fail(ctx, root, "poll_imap",
                        "no protocol to probe: enable poll_imap, poll_pop3 or poll_lmtp");
    return true;
}

/* Reads into a scratch copy so a failed read leaves `cfg` as it was. */
static bool from_doc(struct monitor_config *cfg, const char *name, struct ydoc *doc,
                     struct petrel_error *err)
{
    struct monitor_config fresh;
    monitor_config_defaults(&fresh);
    struct cfg_ctx ctx = {.file = name, .err = err};
    bool ok = read_root(&ctx, doc->root, &fresh);
    ydoc_free(doc);
    if (!ok) {
        monitor_config_free(&fresh);
        return false;
    }
    fresh.config_file = cfg->config_file;
    cfg->config_file = NULL;
    fresh.file = xstrdup(name);
    monitor_config_free(cfg);
    *cfg = fresh;
    return true;
}

bool monitor_config_parse(struct monitor_config *cfg, const char *name, const char *text,
                          size_t len, struct petrel_error *err)
{
    struct ydoc *doc = ydoc_parse(name, text, len, err);
    return doc != NULL && from_doc(cfg, name, doc, err);
}

bool monitor_config_load(struct monitor_config *cfg, struct petrel_error *err)
{
    if (cfg->file != NULL)
        return true;
    char *path = xstrdup(monitor_config_path(cfg));
    struct ydoc *doc = ydoc_load_file(path, err);
    bool ok = doc != NULL && from_doc(cfg, path, doc, err);
    free(path);
    return ok;
}

const struct monitor_credentials *monitor_config_credentials(const struct monitor_config *cfg,
                                                             const char *tag)
{
    const struct monitor_credentials *fallback = NULL;
    for (size_t i = 0; i < cfg->tag_count; i++) {
        if (strcmp(cfg->tags[i].tag, tag != NULL ? tag : "") == 0)
            return &cfg->tags[i];
        if (cfg->tags[i].tag[0] == '\0')
            fallback = &cfg->tags[i];
    }
    return fallback;
}

static const char *yes_no(bool b)
{
    return b ? "true" : "false";
}

void monitor_config_print(const struct monitor_config *cfg, FILE *out)
{
    fputs("monitor:\n", out);
    yaml_put_kv(out, "  ", "config_file", cfg->config_file);
    if (cfg->file == NULL) {
        fputs("  # monitor file not read: the monitor component is off\n", out);
        return;
    }
    /* The file's settings as comments, so this output still reads back as
     * a petrel.yaml (its `monitor:` section only names the file). */
    const char *p = "  #   ";
    fputs("  # effective settings of ", out);
    yaml_put_str(out, cfg->file);
    fputs(":\n", out);
    yaml_put_kv(out, p, "director_addr", cfg->director_addr);
    yaml_put_kv(out, p, "director_secret_file", cfg->director_secret_file);
    yaml_put_kv(out, p, "director_secret_env", cfg->director_secret_env);
    fprintf(out, "%spoll_imap: %s\n%simap_port: %lld\n%simap_tls: %s\n", p, yes_no(cfg->poll_imap),
            p, (long long)cfg->imap_port, p, yes_no(cfg->imap_tls));
    fprintf(out, "%spoll_pop3: %s\n%spop3_port: %lld\n%spop3_tls: %s\n", p, yes_no(cfg->poll_pop3),
            p, (long long)cfg->pop3_port, p, yes_no(cfg->pop3_tls));
    fprintf(out, "%spoll_lmtp: %s\n%slmtp_port: %lld\n", p, yes_no(cfg->poll_lmtp), p,
            (long long)cfg->lmtp_port);
    yaml_put_kv(out, p, "tls_ca_file", cfg->tls_ca_file);
    fprintf(out, "%sinterval: %lldms\n%stimeout: %lldms\n%srapid_interval: %lldms\n", p,
            (long long)cfg->interval_ms, p, (long long)cfg->timeout_ms, p,
            (long long)cfg->rapid_interval_ms);
    fprintf(out, "%sretry_count: %lld\n%srapid_rounds: %lld\n%srapid_fails_needed: %lld\n", p,
            (long long)cfg->retry_count, p, (long long)cfg->rapid_rounds, p,
            (long long)cfg->rapid_fails_needed);
    fprintf(out, "%srestore_flushed: %s\n%smax_backends: %lld\n%smax_line_length: %lld\n", p,
            restore_names[cfg->restore], p, (long long)cfg->max_backends, p,
            (long long)cfg->max_line_length);
    fprintf(out, "%sreconnect_min: %lldms\n%sreconnect_max: %lldms\n%sping_interval: %lldms\n", p,
            (long long)cfg->reconnect_min_ms, p, (long long)cfg->reconnect_max_ms, p,
            (long long)cfg->ping_interval_ms);
    fprintf(out, "%stags:%s\n", p, cfg->tag_count == 0 ? " {}" : "");
    for (size_t i = 0; i < cfg->tag_count; i++) {
        fprintf(out, "%s  ", p);
        yaml_put_key(out, cfg->tags[i].tag);
        fputs(":\n", out);
        fprintf(out, "%s    ", p);
        yaml_put_kv(out, "", "user", cfg->tags[i].user);
        /* never the password itself */
        fprintf(out, "%s    password: \"(set)\"\n", p);
    }
}
