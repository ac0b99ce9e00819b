/* The `login:` section. The fronts' mail keys are read by the same pieces
 * as `imap:` and `pop3:` (protocols/common/mail-login-config.h), under the
 * error paths login.imap and login.pop3. */
#include "server/login-config.h"

#include "clients/ring/ring-auth.h"
#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/endpoint.h"
#include "net/listen-config.h"
#include "protocols/imap/imap-config.h"
#include "protocols/pop3/pop3-config.h"

#include <stdlib.h>
#include <string.h>

/* A proxied session's idle time between commands is the relay's
 * (login.idle_timeout), so a front has no idle_timeout of its own. */
#define LOGIN_FRONT_MAIL_KEYS                                                                      \
    "listen", "listen_tls", "tls_cert_file", "tls_key_file", "auth_addr", "warden_addr",           \
        "disable_plaintext_auth", "max_connections", "max_connections_per_user",                   \
        "max_connections_per_ip", "per_ip_limit_exempt_nets", "login_trusted_networks",            \
        "login_timeout", "auth_timeout"

/* A front reads its protocol's keys with the same defaults
 * (imap_config_section, pop3_config_section), under login.imap and
 * login.pop3 in messages. */
static struct mail_login_section front_section(const struct mail_login_section *protocol,
                                               const char *name)
{
    struct mail_login_section sec = *protocol;
    sec.name = name;
    return sec;
}

static void front_defaults(struct login_front_config *f, const struct mail_login_section *protocol,
                           int64_t backend_port)
{
    memset(f, 0, sizeof(*f));
    mail_login_config_defaults(&f->login, protocol);
    f->max_line_length = 64 * 1024;
    f->max_auth_failures = 3;
    f->backend_port = backend_port;
}

void login_config_defaults(struct login_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->directors = xcalloc(1, sizeof(char *));
    cfg->ring_secret_file = xstrdup("");
    cfg->ring_secret_env = xstrdup("");
    cfg->director_timeout_ms = 2000;
    cfg->transient_retries = 3;
    cfg->backend_tls = false;
    cfg->backend_tls_ca_file = xstrdup("");
    cfg->backend_timeout_ms = 10000;
    cfg->idle_timeout_ms = 30 * 60 * 1000;
    front_defaults(&cfg->imap, &imap_config_section, 0);
    front_defaults(&cfg->pop3, &pop3_config_section, 110);
    lmtp_proxy_config_defaults(&cfg->lmtp);
}

void login_config_free(struct login_config *cfg)
{
    cfg_strv_free(cfg->directors);
    free(cfg->ring_secret_file);
    free(cfg->ring_secret_env);
    free(cfg->backend_tls_ca_file);
    mail_login_config_free(&cfg->imap.login);
    mail_login_config_free(&cfg->pop3.login);
    lmtp_proxy_config_free(&cfg->lmtp);
    memset(cfg, 0, sizeof(*cfg));
}

static bool read_front(const struct cfg_ctx *ctx, const struct ynode *node,
                       const struct mail_login_section *protocol, const char *name, bool pop3,
                       bool required, struct login_front_config *f)
{
    static const char *const imap_keys[] = {LOGIN_FRONT_MAIL_KEYS, "max_line_length",
                                            "backend_port", NULL};
    static const char *const pop3_keys[] = {LOGIN_FRONT_MAIL_KEYS, "max_line_length",
                                            "max_auth_failures", "backend_port", NULL};
    const struct mail_login_section sec = front_section(protocol, name);
    const char *p = sec.name;
    if (node == NULL)
        return true;
    if (!cfg_expect_map(ctx, node, p) ||
        !cfg_check_keys(ctx, node, p, pop3 ? pop3_keys : imap_keys))
        return false;
    f->enabled = true;
    return mail_login_config_read_endpoints(ctx, node, &sec, &f->login) &&
           cfg_int(ctx, node, p, "max_line_length", 1024, 16 * 1024 * 1024, &f->max_line_length) &&
           (!pop3 || cfg_int(ctx, node, p, "max_auth_failures", 1, 100, &f->max_auth_failures)) &&
           cfg_int(ctx, node, p, "backend_port", 0, 65535, &f->backend_port) &&
           mail_login_config_read_limits(ctx, node, &sec, &f->login) &&
           mail_login_config_read_timeouts(ctx, node, &sec, &f->login) &&
           mail_login_config_check(ctx, node, &sec, required, &f->login);
}

static bool check_directors(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                            char **list)
{
    size_t n = 0;
    for (; list != NULL && list[n] != NULL; n++) {
        if (!listen_config_check_target(ctx, node, "login", "directors", list[n], 0))
            return false;
    }
    if (required && n == 0)
        return cfg_fail(ctx, node, "login.directors",
                        "at least one director's ring address is required");
    return true;
}

bool login_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                       struct login_config *cfg)
{
    static const char *const keys[] = {"directors",
                                       "ring_secret_file",
                                       "ring_secret_env",
                                       "director_timeout",
                                       "transient_retries",
                                       "backend_tls",
                                       "backend_tls_ca_file",
                                       "backend_timeout",
                                       "idle_timeout",
                                       "imap",
                                       "pop3",
                                       "lmtp",
                                       NULL};
    const char *p = "login";
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    if (!cfg_string_list(ctx, node, p, "directors", LOGIN_MAX_DIRECTORS, &cfg->directors, NULL) ||
        !check_directors(ctx, node, required, cfg->directors) ||
        !cfg_string(ctx, node, p, "ring_secret_file", &cfg->ring_secret_file) ||
        !cfg_string(ctx, node, p, "ring_secret_env", &cfg->ring_secret_env) ||
        !cfg_duration_ms(ctx, node, p, "director_timeout", 50, 60000, &cfg->director_timeout_ms) ||
        !cfg_int(ctx, node, p, "transient_retries", -1, 100, &cfg->transient_retries) ||
        !cfg_bool(ctx, node, p, "backend_tls", &cfg->backend_tls) ||
        !cfg_string(ctx, node, p, "backend_tls_ca_file", &cfg->backend_tls_ca_file) ||
        !cfg_duration_ms(ctx, node, p, "backend_timeout", 100, 600000, &cfg->backend_timeout_ms) ||
        !cfg_duration_ms(ctx, node, p, "idle_timeout", 1000, 86400000, &cfg->idle_timeout_ms) ||
        !read_front(ctx, ynode_get(node, "imap"), &imap_config_section, "login.imap", false,
                    required, &cfg->imap) ||
        !read_front(ctx, ynode_get(node, "pop3"), &pop3_config_section, "login.pop3", true,
                    required, &cfg->pop3))
        return false;
    /* The LMTP front's subsection (protocols/lmtp/lmtp-proxy.h, errors
     * login.lmtp.<key>). */
    if (!lmtp_proxy_config_read(ctx, ynode_get(node, "lmtp"), &cfg->lmtp))
        return false;
    cfg->lmtp_present = cfg->lmtp.enabled;
    if (required && !cfg->imap.enabled && !cfg->pop3.enabled && !cfg->lmtp_present)
        return cfg_fail(ctx, node, p, "needs at least one front: imap, pop3 or lmtp");
    return true;
}

bool login_config_ring_secret(const struct login_config *cfg, char **out, struct petrel_error *err)
{
    return ring_secret_load(cfg->ring_secret_file, cfg->ring_secret_env, "login.ring_secret_file",
                            out, err);
}

/* A front's keys, indented under `login:` (the shared printers write a
 * top-level section's two spaces). */
static void print_front(const char *name, const struct login_front_config *f, bool pop3, FILE *out)
{
    if (!f->enabled)
        return;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return;
    mail_login_config_print_endpoints(&f->login, mem);
    fprintf(mem, "  disable_plaintext_auth: %s\n  max_line_length: %lld\n",
            f->login.disable_plaintext_auth ? "true" : "false", (long long)f->max_line_length);
    if (pop3)
        fprintf(mem, "  max_auth_failures: %lld\n", (long long)f->max_auth_failures);
    fprintf(mem, "  backend_port: %lld%s\n", (long long)f->backend_port,
            f->backend_port == 0 ? "  # the director's answer" : "");
    mail_login_config_print_limits(&f->login, mem);
    fprintf(mem, "  login_timeout: %lldms\n  auth_timeout: %lldms\n",
            (long long)f->login.login_timeout_ms, (long long)f->login.auth_timeout_ms);
    fclose(mem);
    fprintf(out, "  %s:\n", name);
    for (char *line = text; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        size_t n = nl != NULL ? (size_t)(nl - line) + 1 : strlen(line);
        fprintf(out, "  %.*s", (int)n, line);
        line += n;
    }
    free(text);
}

void login_config_print(const struct login_config *cfg, FILE *out)
{
    fputs("login:\n", out);
    yaml_put_list(out, "  ", "directors", cfg->directors);
    yaml_put_kv(out, "  ", "ring_secret_file", cfg->ring_secret_file);
    yaml_put_kv(out, "  ", "ring_secret_env", cfg->ring_secret_env);
    fprintf(out, "  director_timeout: %lldms\n  transient_retries: %lld\n  backend_tls: %s\n",
            (long long)cfg->director_timeout_ms, (long long)cfg->transient_retries,
            cfg->backend_tls ? "true" : "false");
    yaml_put_kv(out, "  ", "backend_tls_ca_file", cfg->backend_tls_ca_file);
    fprintf(out, "  backend_timeout: %lldms\n  idle_timeout: %lldms\n",
            (long long)cfg->backend_timeout_ms, (long long)cfg->idle_timeout_ms);
    print_front("imap", &cfg->imap, false, out);
    print_front("pop3", &cfg->pop3, true, out);
    lmtp_proxy_config_print(&cfg->lmtp, out);
}
