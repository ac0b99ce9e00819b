/* The `quota:` configuration section (quota-config.h). Defaults follow
 * document 3; the quota_status_* answers and the quota_status service keys
 * follow Dovecot's quota-status settings of the same names. */
#include "storage/quota/quota-config.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/listen-config.h"
#include "storage/quota/quota-rule.h"

#include <stdlib.h>
#include <string.h>

#define SECTION "quota"
#define STATUS_SECTION "quota.quota_status"

void quota_config_defaults(struct quota_config *cfg)
{
    static const char *const none[] = {NULL};
    static const char *const nets[] = {"127.0.0.0/8", "::1/128", NULL};
    memset(cfg, 0, sizeof(*cfg));
    cfg->quota_name = xstrdup("User quota");
    cfg->exceeded_message = xstrdup("Quota exceeded (mailbox for user is full)");
    cfg->storage_percentage = 100;
    cfg->message_percentage = 100;
    cfg->storage_grace = 10u * 1024 * 1024;
    cfg->clone_dicts = cfg_strv_dup(none);
    cfg->clone_flush_delay_ms = 10000;
    cfg->warning_exec_timeout_ms = 10000;
    cfg->over_status_mask = xstrdup("");
    cfg->status_success = xstrdup("DUNNO");
    cfg->status_nouser = xstrdup("REJECT Unknown user");
    cfg->status_overquota = xstrdup("552 5.2.2 Mailbox is full");
    cfg->status_toolarge = xstrdup("");
    struct quota_status_config *s = &cfg->status;
    s->listen = cfg_strv_dup(none);
    s->allowed_nets = cfg_strv_dup(nets);
    s->socket_mode = 0660;
    s->max_connections = 1024;
    s->max_connections_per_ip = 128;
    s->handshake_timeout_ms = 10000;
    s->idle_timeout_ms = 300000; /* Postfix keeps policy connections up to 300 s idle */
    s->max_line_length = 4096;
    s->max_request_bytes = 65536;
    s->max_pipelined = 1024;
    s->auth_addr = xstrdup("");
    s->auth_timeout_ms = 5000;
    s->recipient_delimiter = xstrdup("+");
    s->username_format = xstrdup("%u");
}

void quota_config_free(struct quota_config *cfg)
{
    free(cfg->quota_name);
    free(cfg->exceeded_message);
    cfg_strv_free(cfg->clone_dicts);
    free(cfg->warning_bin_dir);
    for (size_t i = 0; i < cfg->warning_count; i++) {
        free(cfg->warnings[i].name);
        free(cfg->warnings[i].execute);
    }
    free(cfg->warnings);
    free(cfg->over_status_mask);
    free(cfg->over_status_execute);
    free(cfg->status_success);
    free(cfg->status_nouser);
    free(cfg->status_overquota);
    free(cfg->status_toolarge);
    cfg_strv_free(cfg->status.listen);
    cfg_strv_free(cfg->status.allowed_nets);
    free(cfg->status.auth_addr);
    free(cfg->status.recipient_delimiter);
    free(cfg->status.username_format);
    memset(cfg, 0, sizeof(*cfg));
}

static void full_key(char *buf, size_t size, const char *path, const char *key)
{
    snprintf(buf, size, "%s.%s", path, key);
}

/* A size: "50M", "10m", "1024", an integer; "" or absent keeps *out
 * (`empty_is_zero`: "" sets 0). */
static bool read_size(const struct cfg_ctx *ctx, const struct ynode *node, const char *path,
                      const char *key, uint64_t *out)
{
    char *text = NULL;
    if (!cfg_string(ctx, node, path, key, &text))
        return false;
    if (text == NULL)
        return true;
    uint64_t v = 0;
    bool ok = text[0] == '\0' || quota_size_parse(text, strlen(text), &v);
    free(text);
    if (!ok) {
        char full[256];
        full_key(full, sizeof(full), path, key);
        return cfg_fail(ctx, ynode_get(node, key), full,
                        "expected a size: an integer with an optional K, M, G or T unit");
    }
    *out = v;
    return true;
}

/* A program name for quota_warning_bin_dir: no path, no shell. */
static bool bare_name(const char *s)
{
    if (s[0] == '\0' || strlen(s) > 255 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '/' || c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

/* A policy answer: one line of printable text (it follows "action="). */
static bool check_action(const struct cfg_ctx *ctx, const struct ynode *node, const char *key,
                         const char *value, bool may_be_empty)
{
    char full[256];
    full_key(full, sizeof(full), SECTION, key);
    if (value[0] == '\0' && !may_be_empty)
        return cfg_fail(ctx, ynode_get(node, key), full, "must not be empty");
    if (strlen(value) > 512)
        return cfg_fail(ctx, ynode_get(node, key), full, "longer than 512 bytes");
    for (const char *p = value; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f)
            return cfg_fail(ctx, ynode_get(node, key), full,
                            "control characters cannot be sent in a policy answer");
    }
    return true;
}

static bool read_warning(const struct cfg_ctx *ctx, const struct ynode *w,
                         struct quota_warning_config *out)
{
    static const char *const keys[] = {"quota_warning_name",      "quota_warning_resource",
                                       "quota_warning_threshold", "quota_warning_percentage",
                                       "quota_warning_execute",   NULL};
    const char *p = "quota.quota_warnings";
    if (w->type != YNODE_MAP)
        return cfg_fail(ctx, w, p, "each warning is a mapping (quota_warning_name, ...)");
    if (!cfg_check_keys(ctx, w, p, keys))
        return false;
    char *resource = NULL;
    char *threshold = NULL;
    out->percentage = -1;
    bool ok = cfg_string(ctx, w, p, "quota_warning_name", &out->name) &&
              cfg_string(ctx, w, p, "quota_warning_resource", &resource) &&
              cfg_string(ctx, w, p, "quota_warning_threshold", &threshold) &&
              cfg_int(ctx, w, p, "quota_warning_percentage", 0, 100000, &out->percentage) &&
              cfg_string(ctx, w, p, "quota_warning_execute", &out->execute);
    if (ok && (out->name == NULL || out->name[0] == '\0'))
        ok = cfg_fail(ctx, w, "quota.quota_warnings.quota_warning_name", "is required");
    if (ok) {
        if (resource == NULL)
            ok = cfg_fail(ctx, w, "quota.quota_warnings.quota_warning_resource", "is required");
        else if (strcmp(resource, "storage") == 0)
            out->resource = QUOTA_RES_STORAGE;
        else if (strcmp(resource, "message") == 0 || strcmp(resource, "messages") == 0)
            out->resource = QUOTA_RES_MESSAGES;
        else
            ok = cfg_fail(ctx, ynode_get(w, "quota_warning_resource"),
                          "quota.quota_warnings.quota_warning_resource",
                          "expected storage or message");
    }
    if (ok) {
        if (threshold == NULL || strcmp(threshold, "over") == 0)
            out->threshold = QUOTA_WARN_OVER;
        else if (strcmp(threshold, "under") == 0)
            out->threshold = QUOTA_WARN_UNDER;
        else
            ok = cfg_fail(ctx, ynode_get(w, "quota_warning_threshold"),
                          "quota.quota_warnings.quota_warning_threshold", "expected over or under");
    }
    if (ok && out->percentage < 0)
        ok = cfg_fail(ctx, w, "quota.quota_warnings.quota_warning_percentage", "is required");
    if (ok && out->execute != NULL && !bare_name(out->execute))
        ok = cfg_fail(ctx, ynode_get(w, "quota_warning_execute"),
                      "quota.quota_warnings.quota_warning_execute",
                      "a bare program name inside quota_warning_bin_dir (no '/')");
    free(resource);
    free(threshold);
    return ok;
}

static bool read_warnings(const struct cfg_ctx *ctx, const struct ynode *node,
                          struct quota_config *cfg)
{
    const struct ynode *list = ynode_get(node, "quota_warnings");
    if (list == NULL || (list->type == YNODE_SCALAR && list->scalar[0] == '\0'))
        return true;
    if (list->type != YNODE_SEQ)
        return cfg_fail(ctx, list, "quota.quota_warnings", "expected a list of warning rules");
    if (list->count > QUOTA_MAX_WARNINGS)
        return cfg_fail(ctx, list, "quota.quota_warnings", "more than %d warning rules",
                        QUOTA_MAX_WARNINGS);
    cfg->warnings = xcalloc(list->count + 1, sizeof(*cfg->warnings));
    for (size_t i = 0; i < list->count; i++) {
        cfg->warning_count++;
        if (!read_warning(ctx, list->items[i], &cfg->warnings[i]))
            return false;
    }
    return true;
}

static bool read_status(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                        struct quota_status_config *s)
{
    static const char *const keys[] = {LISTEN_CONFIG_SERVER_KEYS,
                                       "idle_timeout",
                                       "max_line_length",
                                       "max_request_bytes",
                                       "max_pipelined",
                                       "auth_addr",
                                       "auth_timeout",
                                       "recipient_delimiter",
                                       "username_format",
                                       NULL};
    const struct listen_config_server server = LISTEN_CONFIG_SERVER_OF(s);
    const char *p = STATUS_SECTION;
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    size_t listen_count = 0;
    if (!listen_config_read_server(ctx, node, p, QUOTA_STATUS_MAX_LISTEN, &server, &listen_count) ||
        !cfg_duration_ms(ctx, node, p, "idle_timeout", 0, 86400000, &s->idle_timeout_ms) ||
        !cfg_int(ctx, node, p, "max_line_length", 256, 65536, &s->max_line_length) ||
        !cfg_int(ctx, node, p, "max_request_bytes", 1024, 1024 * 1024, &s->max_request_bytes) ||
        !cfg_int(ctx, node, p, "max_pipelined", 1, 100000, &s->max_pipelined) ||
        !cfg_string(ctx, node, p, "auth_addr", &s->auth_addr) ||
        !listen_config_check_target(ctx, node, p, "auth_addr", s->auth_addr,
                                    NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK) ||
        !cfg_duration_ms(ctx, node, p, "auth_timeout", 100, 600000, &s->auth_timeout_ms) ||
        !cfg_string(ctx, node, p, "recipient_delimiter", &s->recipient_delimiter) ||
        !cfg_check_recipient_delimiter(ctx, node, p, s->recipient_delimiter) ||
        !cfg_string(ctx, node, p, "username_format", &s->username_format) ||
        !cfg_check_username_format(ctx, node, p, s->username_format))
        return false;
    if (required && listen_count == 0)
        return cfg_fail_key(ctx, node, "listen", STATUS_SECTION ".listen",
                            "the quota-status component needs an address to listen on");
    if (required && s->auth_addr[0] == '\0')
        return cfg_fail_key(ctx, node, "auth_addr", STATUS_SECTION ".auth_addr",
                            "the quota-status component needs the auth service's address");
    return true;
}

bool quota_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool status_required,
                       struct quota_config *cfg)
{
    static const char *const keys[] = {"enabled",
                                       "quota_name",
                                       "quota_exceeded_message",
                                       "quota_mail_size",
                                       "quota_storage_percentage",
                                       "quota_message_percentage",
                                       "quota_storage_extra",
                                       "quota_storage_grace",
                                       "quota_ignore_unlimited",
                                       "quota_hidden",
                                       "quota_mailbox_count",
                                       "quota_mailbox_message_count",
                                       "quota_clone_dicts",
                                       "quota_clone_flush_delay",
                                       "quota_warning_bin_dir",
                                       "quota_warning_exec_timeout",
                                       "quota_warnings",
                                       "quota_over_status_mask",
                                       "quota_over_status_lazy_check",
                                       "quota_over_status_execute",
                                       "quota_status_success",
                                       "quota_status_nouser",
                                       "quota_status_overquota",
                                       "quota_status_toolarge",
                                       "quota_status",
                                       NULL};
    const char *p = SECTION;
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    if (!cfg_bool(ctx, node, p, "enabled", &cfg->enabled) ||
        !cfg_string(ctx, node, p, "quota_name", &cfg->quota_name) ||
        !cfg_string(ctx, node, p, "quota_exceeded_message", &cfg->exceeded_message) ||
        !check_action(ctx, node, "quota_exceeded_message", cfg->exceeded_message, false) ||
        !read_size(ctx, node, p, "quota_mail_size", &cfg->mail_size) ||
        !cfg_int(ctx, node, p, "quota_storage_percentage", 1, 10000, &cfg->storage_percentage) ||
        !cfg_int(ctx, node, p, "quota_message_percentage", 1, 10000, &cfg->message_percentage) ||
        !read_size(ctx, node, p, "quota_storage_extra", &cfg->storage_extra) ||
        !read_size(ctx, node, p, "quota_storage_grace", &cfg->storage_grace) ||
        !cfg_bool(ctx, node, p, "quota_ignore_unlimited", &cfg->ignore_unlimited) ||
        !cfg_bool(ctx, node, p, "quota_hidden", &cfg->hidden) ||
        !cfg_int(ctx, node, p, "quota_mailbox_count", 0, 1000000, &cfg->mailbox_count) ||
        !cfg_int(ctx, node, p, "quota_mailbox_message_count", 0, 100000000,
                 &cfg->mailbox_message_count) ||
        !cfg_string_list(ctx, node, p, "quota_clone_dicts", QUOTA_MAX_CLONE_DICTS,
                         &cfg->clone_dicts, NULL) ||
        !cfg_duration_ms(ctx, node, p, "quota_clone_flush_delay", 0, 86400000,
                         &cfg->clone_flush_delay_ms) ||
        !cfg_string(ctx, node, p, "quota_warning_bin_dir", &cfg->warning_bin_dir) ||
        !cfg_duration_ms(ctx, node, p, "quota_warning_exec_timeout", 100, 3600000,
                         &cfg->warning_exec_timeout_ms) ||
        !read_warnings(ctx, node, cfg) ||
        !cfg_string(ctx, node, p, "quota_over_status_mask", &cfg->over_status_mask) ||
        !cfg_bool(ctx, node, p, "quota_over_status_lazy_check", &cfg->over_status_lazy_check) ||
        !cfg_string(ctx, node, p, "quota_over_status_execute", &cfg->over_status_execute) ||
        !cfg_string(ctx, node, p, "quota_status_success", &cfg->status_success) ||
        !check_action(ctx, node, "quota_status_success", cfg->status_success, false) ||
        !cfg_string(ctx, node, p, "quota_status_nouser", &cfg->status_nouser) ||
        !check_action(ctx, node, "quota_status_nouser", cfg->status_nouser, true) ||
        !cfg_string(ctx, node, p, "quota_status_overquota", &cfg->status_overquota) ||
        !check_action(ctx, node, "quota_status_overquota", cfg->status_overquota, false) ||
        !cfg_string(ctx, node, p, "quota_status_toolarge", &cfg->status_toolarge) ||
        !check_action(ctx, node, "quota_status_toolarge", cfg->status_toolarge, true) ||
        !read_status(ctx, ynode_get(node, "quota_status"), status_required, &cfg->status))
        return false;
    if (cfg->warning_bin_dir != NULL && cfg->warning_bin_dir[0] == '\0') {
        free(cfg->warning_bin_dir);
        cfg->warning_bin_dir = NULL;
    }
    if (cfg->warning_bin_dir != NULL && cfg->warning_bin_dir[0] != '/')
        return cfg_fail(ctx, ynode_get(node, "quota_warning_bin_dir"),
                        "quota.quota_warning_bin_dir", "must be an absolute path");
    if (cfg->over_status_execute != NULL && cfg->over_status_execute[0] == '\0') {
        free(cfg->over_status_execute);
        cfg->over_status_execute = NULL;
    }
    if (cfg->over_status_execute != NULL && !bare_name(cfg->over_status_execute))
        return cfg_fail(ctx, ynode_get(node, "quota_over_status_execute"),
                        "quota.quota_over_status_execute",
                        "a bare program name inside quota_warning_bin_dir (no '/')");
    if (strlen(cfg->over_status_mask) > 256)
        return cfg_fail(ctx, ynode_get(node, "quota_over_status_mask"),
                        "quota.quota_over_status_mask", "longer than 256 bytes");
    if (cfg->quota_name[0] == '\0' || strlen(cfg->quota_name) > 256)
        return cfg_fail(ctx, ynode_get(node, "quota_name"), "quota.quota_name",
                        "must be 1 to 256 bytes");
    return true;
}

const char *quota_warning_threshold_name(enum quota_warning_threshold t)
{
    return t == QUOTA_WARN_UNDER ? "under" : "over";
}

static void put_bool(FILE *out, const char *key, bool v)
{
    fprintf(out, "  %s: %s\n", key, v ? "true" : "false");
}

void quota_config_print(const struct quota_config *cfg, FILE *out)
{
    fputs("quota:\n", out);
    put_bool(out, "enabled", cfg->enabled);
    yaml_put_kv(out, "  ", "quota_name", cfg->quota_name);
    yaml_put_kv(out, "  ", "quota_exceeded_message", cfg->exceeded_message);
    fprintf(out, "  quota_mail_size: %llu\n", (unsigned long long)cfg->mail_size);
    fprintf(out, "  quota_storage_percentage: %lld\n", (long long)cfg->storage_percentage);
    fprintf(out, "  quota_message_percentage: %lld\n", (long long)cfg->message_percentage);
    fprintf(out, "  quota_storage_extra: %llu\n", (unsigned long long)cfg->storage_extra);
    fprintf(out, "  quota_storage_grace: %llu\n", (unsigned long long)cfg->storage_grace);
    put_bool(out, "quota_ignore_unlimited", cfg->ignore_unlimited);
    put_bool(out, "quota_hidden", cfg->hidden);
    fprintf(out, "  quota_mailbox_count: %lld\n", (long long)cfg->mailbox_count);
    fprintf(out, "  quota_mailbox_message_count: %lld\n", (long long)cfg->mailbox_message_count);
    yaml_put_list(out, "  ", "quota_clone_dicts", cfg->clone_dicts);
    fprintf(out, "  quota_clone_flush_delay: %lldms\n", (long long)cfg->clone_flush_delay_ms);
    yaml_put_kv(out, "  ", "quota_warning_bin_dir", cfg->warning_bin_dir);
    fprintf(out, "  quota_warning_exec_timeout: %lldms\n", (long long)cfg->warning_exec_timeout_ms);
    fprintf(out, "  quota_warnings:%s\n", cfg->warning_count == 0 ? " []" : "");
    for (size_t i = 0; i < cfg->warning_count; i++) {
        const struct quota_warning_config *w = &cfg->warnings[i];
        yaml_put_kv(out, "    - ", "quota_warning_name", w->name);
        fprintf(out, "      quota_warning_resource: %s\n",
                w->resource == QUOTA_RES_STORAGE ? "storage" : "message");
        fprintf(out, "      quota_warning_threshold: %s\n",
                quota_warning_threshold_name(w->threshold));
        fprintf(out, "      quota_warning_percentage: %lld\n", (long long)w->percentage);
        yaml_put_kv(out, "      ", "quota_warning_execute", w->execute);
    }
    yaml_put_kv(out, "  ", "quota_over_status_mask", cfg->over_status_mask);
    put_bool(out, "quota_over_status_lazy_check", cfg->over_status_lazy_check);
    yaml_put_kv(out, "  ", "quota_over_status_execute", cfg->over_status_execute);
    yaml_put_kv(out, "  ", "quota_status_success", cfg->status_success);
    yaml_put_kv(out, "  ", "quota_status_nouser", cfg->status_nouser);
    yaml_put_kv(out, "  ", "quota_status_overquota", cfg->status_overquota);
    yaml_put_kv(out, "  ", "quota_status_toolarge", cfg->status_toolarge);
    const struct quota_status_config *s = &cfg->status;
    fputs("  quota_status:\n", out);
    listen_config_print_server(out, "    ", s->listen, s->allowed_nets, s->socket_mode,
                               s->max_connections, s->max_connections_per_ip,
                               s->handshake_timeout_ms);
    fprintf(out, "    idle_timeout: %lldms\n    max_line_length: %lld\n",
            (long long)s->idle_timeout_ms, (long long)s->max_line_length);
    fprintf(out, "    max_request_bytes: %lld\n    max_pipelined: %lld\n",
            (long long)s->max_request_bytes, (long long)s->max_pipelined);
    yaml_put_kv(out, "    ", "auth_addr", s->auth_addr);
    fprintf(out, "    auth_timeout: %lldms\n", (long long)s->auth_timeout_ms);
    yaml_put_kv(out, "    ", "recipient_delimiter", s->recipient_delimiter);
    yaml_put_kv(out, "    ", "username_format", s->username_format);
}
