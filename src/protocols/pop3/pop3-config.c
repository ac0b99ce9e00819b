/* The `pop3:` section: the keys every mail protocol has
 * (protocols/common/mail-login-config.h) and POP3's own. */
#include "protocols/pop3/pop3-config.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/cidr.h"
#include "protocols/pop3/pop3-uidl.h"

#include <stdlib.h>
#include <string.h>

const struct mail_login_section pop3_config_section = {
    .name = "pop3",
    .listen = ":110",
    .max_connections_per_user = 10,
    .idle_timeout_ms = 10 * 60 * 1000, /* RFC 1939 section 3: at least 10 minutes */
    .min_idle_timeout_ms = 10 * 60 * 1000,
};

void pop3_config_defaults(struct pop3_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    mail_login_config_defaults(&cfg->login, &pop3_config_section);
    cfg->secure_nets = xcalloc(3, sizeof(char *));
    cfg->secure_nets[0] = xstrdup("127.0.0.0/8");
    cfg->secure_nets[1] = xstrdup("::1/128");
    cfg->max_line_length = 8192;
    cfg->max_auth_failures = 3;
    cfg->uidl_format = xstrdup(POP3_UIDL_DEFAULT_FORMAT);
    cfg->retr_sets_seen = true;
}

void pop3_config_free(struct pop3_config *cfg)
{
    mail_login_config_free(&cfg->login);
    cfg_strv_free(cfg->secure_nets);
    free(cfg->uidl_format);
    memset(cfg, 0, sizeof(*cfg));
}

static bool check_nets(const struct cfg_ctx *ctx, const struct ynode *node, char **list)
{
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        struct cidr net;
        struct petrel_error e;
        if (!cidr_parse(list[i], &net, &e)) {
            const struct ynode *n = ynode_get(node, "secure_nets");
            if (n != NULL && n->type == YNODE_SEQ && i < n->count)
                n = n->items[i];
            return cfg_fail(ctx, n, "pop3.secure_nets", "%s", e.message);
        }
    }
    return true;
}

static bool check_uidl_format(const struct cfg_ctx *ctx, const struct ynode *node,
                              const char *format)
{
    struct petrel_error e;
    if (pop3_uidl_format_check(format, &e))
        return true;
    const struct ynode *n = ynode_get(node, "uidl_format");
    return cfg_fail(ctx, n != NULL ? n : node, "pop3.uidl_format", "%s", e.message);
}

bool pop3_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct pop3_config *cfg)
{
    static const char *const keys[] = {MAIL_LOGIN_CONFIG_KEYS,
                                       "secure_nets",
                                       "max_line_length",
                                       "max_auth_failures",
                                       "uidl_format",
                                       "retr_sets_seen",
                                       NULL};
    const char *p = pop3_config_section.name;
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    return mail_login_config_read_endpoints(ctx, node, &pop3_config_section, &cfg->login) &&
           cfg_string_list(ctx, node, p, "secure_nets", 256, &cfg->secure_nets, NULL) &&
           check_nets(ctx, node, cfg->secure_nets) &&
           cfg_int(ctx, node, p, "max_line_length", 1024, 1024 * 1024, &cfg->max_line_length) &&
           mail_login_config_read_limits(ctx, node, &pop3_config_section, &cfg->login) &&
           cfg_int(ctx, node, p, "max_auth_failures", 1, 100, &cfg->max_auth_failures) &&
           mail_login_config_read_timeouts(ctx, node, &pop3_config_section, &cfg->login) &&
           cfg_string(ctx, node, p, "uidl_format", &cfg->uidl_format) &&
           check_uidl_format(ctx, node, cfg->uidl_format) &&
           cfg_bool(ctx, node, p, "retr_sets_seen", &cfg->retr_sets_seen) &&
           mail_login_config_check(ctx, node, &pop3_config_section, required, &cfg->login);
}

void pop3_config_print(const struct pop3_config *cfg, FILE *out)
{
    fputs("pop3:\n", out);
    mail_login_config_print_endpoints(&cfg->login, out);
    yaml_put_list(out, "  ", "secure_nets", cfg->secure_nets);
    fprintf(out, "  disable_plaintext_auth: %s\n  max_line_length: %lld\n",
            cfg->login.disable_plaintext_auth ? "true" : "false", (long long)cfg->max_line_length);
    mail_login_config_print_limits(&cfg->login, out);
    fprintf(out, "  max_auth_failures: %lld\n", (long long)cfg->max_auth_failures);
    mail_login_config_print_timeouts(&cfg->login, out);
    yaml_put_kv(out, "  ", "uidl_format", cfg->uidl_format);
    fprintf(out, "  retr_sets_seen: %s\n", cfg->retr_sets_seen ? "true" : "false");
}
