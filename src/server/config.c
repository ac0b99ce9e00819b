#include "server/config.h"

#include "server/component.h"

#include "core/cfg-read.h"
#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "core/yaml-doc.h"
#include "net/endpoint.h"
#include "net/listen-config.h"

#include <stdlib.h>
#include <string.h>

static void defaults(struct petrel_config *cfg)
{
    cfg->log.base = LOG_INFO;
    cfg->shutdown_timeout_ms = 10000;
    cfg->memory_trim_interval_ms = 30000;
    cfg->telemetry.listen = xstrdup(":8080");
    cfg->telemetry.readiness_deadline_ms = 800;
    cfg->telemetry.token_env = xstrdup("TELEMETRY_TOKEN");
    for (size_t i = 0; component_table[i] != NULL; i++)
        component_table[i]->config_defaults(cfg);
    cfg->internal_tls.require_client_cert = true;
}

void config_free(struct petrel_config *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->file);
    cfg_strv_free(cfg->components);
    free(cfg->user);
    free(cfg->group);
    free(cfg->telemetry.listen);
    cfg_strv_free(cfg->telemetry.allowed_nets);
    free(cfg->telemetry.token_env);
    for (size_t i = 0; i < cfg->telemetry.check_count; i++) {
        free(cfg->telemetry.checks[i].name);
        free(cfg->telemetry.checks[i].tcp);
    }
    free(cfg->telemetry.checks);
    free(cfg->internal_tls.cert_file);
    free(cfg->internal_tls.key_file);
    free(cfg->internal_tls.ca_file);
    for (size_t i = 0; component_table[i] != NULL; i++)
        component_table[i]->config_free(cfg);
    dict_settings_free(cfg->dicts);
    mail_config_free(&cfg->mail);
    free(cfg);
}

static bool read_log(const struct cfg_ctx *ctx, const struct ynode *root, struct petrel_config *cfg)
{
    char *level = NULL;
    if (!cfg_string(ctx, root, "", "log_level", &level))
        return false;
    if (level != NULL) {
        bool ok = log_level_parse(level, &cfg->log.base);
        free(level);
        if (!ok)
            return cfg_fail(ctx, ynode_get(root, "log_level"), "log_level",
                            "expected debug, info, warn or error");
    }
    const struct ynode *ov = ynode_get(root, "log_level_overrides");
    if (!cfg_expect_map(ctx, ov, "log_level_overrides"))
        return false;
    if (ov == NULL || ov->type != YNODE_MAP)
        return true;
    if (ov->count > LOG_MAX_OVERRIDES)
        return cfg_fail(ctx, ov, "log_level_overrides", "more than %d entries",
                        LOG_MAX_OVERRIDES);
    for (size_t i = 0; i < ov->count; i++) {
        const struct ynode *v = ov->items[i];
        struct log_override *o = &cfg->log.overrides[cfg->log.override_count];
        char full[256];
        snprintf(full, sizeof(full), "log_level_overrides.%s", ov->keys[i]);
        if (strlen(ov->keys[i]) >= sizeof(o->component))
            return cfg_fail(ctx, v, full, "component name too long");
        if (v->type != YNODE_SCALAR || !log_level_parse(v->scalar, &o->level))
            return cfg_fail(ctx, v, full, "expected debug, info, warn or error");
        snprintf(o->component, sizeof(o->component), "%s", ov->keys[i]);
        cfg->log.override_count++;
    }
    return true;
}

static bool read_telemetry(const struct cfg_ctx *ctx, const struct ynode *node,
                           struct telemetry_config *t)
{
    static const char *const keys[] = {"listen",
                                       "allowed_nets",
                                       "readiness_checks",
                                       "readiness_deadline",
                                       "token_env",
                                       "allow_unauthenticated_remote",
                                       NULL};
    if (!cfg_expect_map(ctx, node, "telemetry") || !cfg_check_keys(ctx, node, "telemetry", keys))
        return false;
    if (!cfg_string(ctx, node, "telemetry", "listen", &t->listen) ||
        !listen_config_check_address(ctx, node, "telemetry", "listen", t->listen) ||
        !listen_config_read_nets(ctx, node, "telemetry", &t->allowed_nets) ||
        !cfg_duration_ms(ctx, node, "telemetry", "readiness_deadline", 10, 60000,
                         &t->readiness_deadline_ms) ||
        !cfg_string(ctx, node, "telemetry", "token_env", &t->token_env) ||
        !cfg_bool(ctx, node, "telemetry", "allow_unauthenticated_remote",
                  &t->allow_unauthenticated_remote))
        return false;
    const struct ynode *checks = ynode_get(node, "readiness_checks");
    if (checks == NULL)
        return true;
    if (checks->type != YNODE_SEQ)
        return cfg_fail(ctx, checks, "telemetry.readiness_checks", "expected a list");
    if (checks->count > 64)
        return cfg_fail(ctx, checks, "telemetry.readiness_checks", "more than 64 checks");
    t->checks = xcalloc(checks->count + 1, sizeof(*t->checks));
    for (size_t i = 0; i < checks->count; i++) {
        static const char *const ckeys[] = {"name", "tcp", "tls", NULL};
        const struct ynode *c = checks->items[i];
        const char *path = "telemetry.readiness_checks";
        if (c->type != YNODE_MAP)
            return cfg_fail(ctx, c, path, "each check is a mapping with name and tcp");
        if (!cfg_check_keys(ctx, c, path, ckeys))
            return false;
        struct readiness_check_config *rc = &t->checks[t->check_count++];
        if (!cfg_string(ctx, c, path, "name", &rc->name) ||
            !cfg_string(ctx, c, path, "tcp", &rc->tcp) || !cfg_bool(ctx, c, path, "tls", &rc->tls))
            return false;
        if (rc->name == NULL || rc->name[0] == '\0')
            return cfg_fail(ctx, c, path, "name is required");
        if (rc->tcp == NULL)
            return cfg_fail(ctx, c, path, "tcp (host:port) is required");
        if (!listen_config_check_target(ctx, c, path, "tcp", rc->tcp, NET_ENDPOINT_NAME_REJECT))
            return false;
    }
    return true;
}

static bool read_tls(const struct cfg_ctx *ctx, const struct ynode *node, struct tls_config *t)
{
    static const char *const keys[] = {"enabled", "cert_file", "key_file", "ca_file",
                                       "require_client_cert", NULL};
    if (!cfg_expect_map(ctx, node, "internal_tls") ||
        !cfg_check_keys(ctx, node, "internal_tls", keys))
        return false;
    if (!cfg_bool(ctx, node, "internal_tls", "enabled", &t->enabled) ||
        !cfg_string(ctx, node, "internal_tls", "cert_file", &t->cert_file) ||
        !cfg_string(ctx, node, "internal_tls", "key_file", &t->key_file) ||
        !cfg_string(ctx, node, "internal_tls", "ca_file", &t->ca_file) ||
        !cfg_bool(ctx, node, "internal_tls", "require_client_cert", &t->require_client_cert))
        return false;
    if (t->enabled && (t->cert_file == NULL || t->key_file == NULL))
        return cfg_fail(ctx, node, "internal_tls", "enabled needs cert_file and key_file");
    return true;
}

/* mail.attribute_dict names a dict of the `dicts:` section that every
 * thread can share: a memory dict is private to the loop it is opened on
 * (IMAP workers each get their own instance), so entries would differ
 * between the API and IMAP. */
/* mail.acl.sharing_map names a dict every thread shares too (the API and
 * every IMAP worker read and write the same registry). */
static bool check_sharing_map(const struct cfg_ctx *ctx, const struct ynode *mail,
                              const struct petrel_config *cfg)
{
    const char *name = cfg->mail.acl.sharing_map;
    if (name == NULL)
        return true;
    const struct ynode *node = ynode_get(ynode_get(mail, "acl"), "sharing_map");
    for (size_t k = 0; k < dict_settings_count(cfg->dicts); k++) {
        if (strcmp(dict_settings_name(cfg->dicts, k), name) != 0)
            continue;
        if (strcmp(dict_settings_driver(cfg->dicts, k), "memory") == 0)
            return cfg_fail(ctx, node, "mail.acl.sharing_map",
                            "dict '%s' is a memory dict, which each IMAP worker would hold apart; "
                            "use file, sql or kvstore",
                            name);
        return true;
    }
    return cfg_fail(ctx, node, "mail.acl.sharing_map", "no dict named '%s' in dicts:", name);
}

static bool check_attribute_dict(const struct cfg_ctx *ctx, const struct ynode *mail,
                                 const struct petrel_config *cfg)
{
    const char *name = cfg->mail.attribute_dict;
    if (name == NULL)
        return true;
    for (size_t k = 0; k < dict_settings_count(cfg->dicts); k++) {
        if (strcmp(dict_settings_name(cfg->dicts, k), name) != 0)
            continue;
        if (strcmp(dict_settings_driver(cfg->dicts, k), "memory") == 0)
            return cfg_fail(ctx, ynode_get(mail, "attribute_dict"), "mail.attribute_dict",
                            "dict '%s' is a memory dict, which each IMAP worker would hold apart; "
                            "use file, sql or kvstore",
                            name);
        return true;
    }
    return cfg_fail(ctx, ynode_get(mail, "attribute_dict"), "mail.attribute_dict",
                    "no dict named '%s' in dicts:", name);
}

static bool valid_component(const char *name)
{
    return component_find(name) != NULL;
}

static bool check_components(const struct cfg_ctx *ctx, const struct ynode *root, char **list)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        if (!valid_component(list[i]))
            return cfg_fail(ctx, cfg_list_item(root, "components", i), "components", "unknown component '%s'",
                            list[i]);
        for (size_t k = 0; k < i; k++) {
            if (strcmp(list[k], list[i]) == 0)
                return cfg_fail(ctx, cfg_list_item(root, "components", i), "components", "'%s' listed twice",
                                list[i]);
        }
    }
    return true;
}

static bool listed(char **list, const char *name)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        if (strcmp(list[i], name) == 0)
            return true;
    }
    return false;
}

/* Environment overrides named in the specification. */
static bool apply_env(const struct cfg_ctx *ctx, struct petrel_config *cfg)
{
    const char *level = getenv("LOG_LEVEL");
    if (level != NULL && *level != '\0' && !log_level_parse(level, &cfg->log.base))
        return petrel_error_set(ctx->err, PETREL_ERR_INVALID,
                                "LOG_LEVEL: expected debug, info, warn or error, found '%s'",
                                level);
    const char *comp = getenv("PETREL_COMPONENT");
    if (comp != NULL && *comp != '\0') {
        char **list = xcalloc(CONFIG_MAX_LIST + 1, sizeof(char *));
        size_t n = 0;
        const char *p = comp;
        while (*p != '\0' && n < CONFIG_MAX_LIST) {
            size_t len = strcspn(p, ", ");
            if (len > 0)
                list[n++] = xstrndup(p, len);
            p += len;
            while (*p == ',' || *p == ' ')
                p++;
        }
        if (n == 0) { /* only separators: as good as empty, so ignored */
            free(list);
            return true;
        }
        for (size_t i = 0; i < n; i++) {
            if (!valid_component(list[i])) {
                petrel_error_set(ctx->err, PETREL_ERR_INVALID,
                                 "PETREL_COMPONENT: unknown component '%s'", list[i]);
                cfg_strv_free(list);
                return false;
            }
        }
        cfg_strv_free(cfg->components);
        cfg->components = list;
    }
    return true;
}

/* The top-level keys: the process's own, then each component's section. */
static const char *const *root_keys(const char **keys, size_t cap)
{
    static const char *const own[] = {"components", "log_level", "log_level_overrides", "user",
                                      "group", "allow_root", "shutdown_timeout",
                                      "memory_trim_interval", "telemetry", "internal_tls",
                                      "dicts", "mail", NULL};
    size_t n = 0;
    for (size_t i = 0; own[i] != NULL && n + 1 < cap; i++)
        keys[n++] = own[i];
    for (size_t i = 0; component_table[i] != NULL && n + 1 < cap; i++) {
        if (component_table[i]->section != NULL)
            keys[n++] = component_table[i]->section;
    }
    keys[n] = NULL;
    return keys;
}

static bool read_root(const struct cfg_ctx *ctx, const struct ynode *root, struct petrel_config *cfg)
{
    const char *keys[64];
    if (!cfg_expect_map(ctx, root, "") ||
        !cfg_check_keys(ctx, root, "", root_keys(keys, sizeof(keys) / sizeof(keys[0]))))
        return false;
    if (!cfg_string_list(ctx, root, "", "components", 64, &cfg->components, NULL) ||
        !check_components(ctx, root, cfg->components) ||
        !read_log(ctx, root, cfg) || !cfg_string(ctx, root, "", "user", &cfg->user) ||
        !cfg_string(ctx, root, "", "group", &cfg->group) ||
        !cfg_bool(ctx, root, "", "allow_root", &cfg->allow_root) ||
        !cfg_duration_ms(ctx, root, "", "shutdown_timeout", 0, 3600000,
                         &cfg->shutdown_timeout_ms) ||
        !cfg_duration_ms(ctx, root, "", "memory_trim_interval", 0, 3600000,
                         &cfg->memory_trim_interval_ms) ||
        !read_telemetry(ctx, ynode_get(root, "telemetry"), &cfg->telemetry) ||
        !read_tls(ctx, ynode_get(root, "internal_tls"), &cfg->internal_tls))
        return false;
    cfg->dicts = dict_settings_read(ctx->file, ynode_get(root, "dicts"), ctx->err);
    if (cfg->dicts == NULL)
        return false;
    if (!mail_config_read(ctx->file, ynode_get(root, "mail"), &cfg->mail, ctx->err) ||
        !check_attribute_dict(ctx, ynode_get(root, "mail"), cfg) ||
        !check_sharing_map(ctx, ynode_get(root, "mail"), cfg))
        return false;
    for (size_t i = 0; component_table[i] != NULL; i++) {
        const struct component_def *c = component_table[i];
        const struct ynode *section = c->section != NULL ? ynode_get(root, c->section) : NULL;
        if (!c->config_read(ctx, section, listed(cfg->components, c->name), cfg))
            return false;
    }
    if (cfg->components == NULL) {
        cfg->components = xcalloc(2, sizeof(char *));
        cfg->components[0] = xstrdup("backend-api");
    }
    return true;
}

/* Builds the configuration from a parsed document; frees the document. */
static struct petrel_config *config_from_doc(const char *name, struct ydoc *doc,
                                             struct petrel_error *err)
{
    struct petrel_config *cfg = xcalloc(1, sizeof(*cfg));
    cfg->file = xstrdup(name);
    defaults(cfg);
    struct cfg_ctx ctx = {.file = name, .err = err};
    bool ok = read_root(&ctx, doc->root, cfg) && apply_env(&ctx, cfg);
    ydoc_free(doc);
    if (!ok) {
        config_free(cfg);
        return NULL;
    }
    return cfg;
}

struct petrel_config *config_parse(const char *name, const char *text, size_t len,
                                   struct petrel_error *err)
{
    struct ydoc *doc = ydoc_parse(name, text, len, err);
    return doc != NULL ? config_from_doc(name, doc, err) : NULL;
}

struct petrel_config *config_load(const char *path, struct petrel_error *err)
{
    struct ydoc *doc = ydoc_load_file(path, err);
    return doc != NULL ? config_from_doc(path, doc, err) : NULL;
}

bool config_has_component(const struct petrel_config *cfg, const char *component)
{
    for (size_t i = 0; cfg->components != NULL && cfg->components[i] != NULL; i++) {
        if (strcmp(cfg->components[i], component) == 0)
            return true;
    }
    return false;
}

void config_print(const struct petrel_config *cfg, FILE *out)
{
    fputs("# effective configuration of ", out);
    yaml_put_str(out, cfg->file);
    fputc('\n', out);
    yaml_put_list(out, "", "components", cfg->components);
    fprintf(out, "log_level: %s\n", log_level_name(cfg->log.base));
    fprintf(out, "log_level_overrides:%s\n", cfg->log.override_count == 0 ? " {}" : "");
    for (size_t i = 0; i < cfg->log.override_count; i++) {
        fputs("  ", out);
        yaml_put_key(out, cfg->log.overrides[i].component);
        fprintf(out, ": %s\n", log_level_name(cfg->log.overrides[i].level));
    }
    yaml_put_kv(out, "", "user", cfg->user);
    yaml_put_kv(out, "", "group", cfg->group);
    fprintf(out, "allow_root: %s\n", cfg->allow_root ? "true" : "false");
    fprintf(out, "shutdown_timeout: %lldms\n", (long long)cfg->shutdown_timeout_ms);
    fprintf(out, "memory_trim_interval: %lldms\n", (long long)cfg->memory_trim_interval_ms);
    fputs("telemetry:\n", out);
    yaml_put_kv(out, "  ", "listen", cfg->telemetry.listen);
    yaml_put_list(out, "  ", "allowed_nets", cfg->telemetry.allowed_nets);
    fprintf(out, "  readiness_deadline: %lldms\n", (long long)cfg->telemetry.readiness_deadline_ms);
    yaml_put_kv(out, "  ", "token_env", cfg->telemetry.token_env);
    fprintf(out, "  allow_unauthenticated_remote: %s\n",
            cfg->telemetry.allow_unauthenticated_remote ? "true" : "false");
    fprintf(out, "  readiness_checks:%s\n", cfg->telemetry.check_count == 0 ? " []" : "");
    for (size_t i = 0; i < cfg->telemetry.check_count; i++) {
        yaml_put_kv(out, "    - ", "name", cfg->telemetry.checks[i].name);
        yaml_put_kv(out, "      ", "tcp", cfg->telemetry.checks[i].tcp);
        fprintf(out, "      tls: %s\n", cfg->telemetry.checks[i].tls ? "true" : "false");
    }
    fprintf(out, "internal_tls:\n  enabled: %s\n", cfg->internal_tls.enabled ? "true" : "false");
    yaml_put_kv(out, "  ", "cert_file", cfg->internal_tls.cert_file);
    yaml_put_kv(out, "  ", "key_file", cfg->internal_tls.key_file);
    yaml_put_kv(out, "  ", "ca_file", cfg->internal_tls.ca_file);
    fprintf(out, "  require_client_cert: %s\n",
            cfg->internal_tls.require_client_cert ? "true" : "false");
    for (size_t i = 0; component_table[i] != NULL; i++)
        component_table[i]->config_print(cfg, out);
    static const char *const fsync_names[] = {"always", "optimized", "never"};
    fputs("mail:\n", out);
    yaml_put_kv(out, "  ", "home", cfg->mail.home);
    yaml_put_kv(out, "  ", "attribute_dict",
                cfg->mail.attribute_dict != NULL ? cfg->mail.attribute_dict : "");
    fprintf(out,
            "  metadata_max_value_bytes: %lld\n  metadata_max_entries: %lld\n"
            "  metadata_private: %s\n",
            (long long)cfg->mail.metadata_max_value_bytes,
            (long long)cfg->mail.metadata_max_entries,
            cfg->mail.metadata_private ? "true" : "false");
    yaml_put_kv(out, "  ", "metadata_server_admin",
                cfg->mail.metadata_server_admin != NULL ? cfg->mail.metadata_server_admin : "");
    fprintf(out, "  fsync: %s\n  special_use:%s\n", fsync_names[cfg->mail.fsync],
            cfg->mail.special_use_count == 0 ? " {}" : "");
    for (size_t i = 0; i < cfg->mail.special_use_count; i++)
        yaml_put_kv(out, "    ", cfg->mail.special_use[i].folder, cfg->mail.special_use[i].attr);
    fputs("  namespaces:\n", out);
    for (size_t i = 0; i < cfg->mail.namespace_count; i++) {
        const struct namespace_config *ns = &cfg->mail.namespaces[i];
        char sep[2] = {ns->separator, '\0'};
        fprintf(out, "    # slug %s\n", ns->slug);
        yaml_put_kv(out, "    - ", "name", ns->name);
        fprintf(out, "      type: %s\n", namespace_type_name(ns->type));
        yaml_put_kv(out, "      ", "prefix", ns->prefix);
        yaml_put_kv(out, "      ", "separator", sep);
        yaml_put_kv(out, "      ", "location", ns->location);
        fprintf(out, "      subscriptions: %s\n", ns->subscriptions ? "true" : "false");
        if (ns->private_index != NULL)
            yaml_put_kv(out, "      ", "index_private", ns->private_index);
    }
    fprintf(out, "  acl:\n    enabled: %s\n    allow_anyone: %s\n    cache_secs: %lldms\n",
            cfg->mail.acl.enabled ? "true" : "false", cfg->mail.acl.allow_anyone ? "true" : "false",
            (long long)cfg->mail.acl.cache_ms);
    yaml_put_kv(out, "    ", "sharing_map",
                cfg->mail.acl.sharing_map != NULL ? cfg->mail.acl.sharing_map : "");
    fprintf(out, "dicts:%s\n", dict_settings_count(cfg->dicts) == 0 ? " {}" : "");
    for (size_t i = 0; i < dict_settings_count(cfg->dicts); i++)
        fprintf(out, "  %s: {driver: %s}  # driver options not shown\n",
                dict_settings_name(cfg->dicts, i), dict_settings_driver(cfg->dicts, i));
}
