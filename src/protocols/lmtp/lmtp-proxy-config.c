/* The `login.lmtp` section: the LMTP front's share of the `lmtp:` keys
 * (read by lmtp_config_read_values) and backend_port. */
#include "protocols/lmtp/lmtp-proxy.h"

#include "core/xalloc.h"
#include "core/yaml-print.h"
#include "net/listen-config.h"

#include <stdlib.h>
#include <string.h>

#define P "login.lmtp"

void lmtp_proxy_config_defaults(struct lmtp_proxy_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    lmtp_config_defaults(&cfg->front);
    /* No listener unless configured (the lmtp component owns port 24). */
    cfg_strv_free(cfg->front.listen);
    cfg->front.listen = xcalloc(1, sizeof(char *));
    /* The backend writes the Received header (with the XCLIENT address). */
    cfg->front.add_received_header = false;
    /* The front faces MTAs from allowed_nets: one address holding
     * every slot is a fault, not a load (Postfix sends 20 at most by
     * default, default_destination_concurrency_limit). */
    cfg->front.max_connections_per_ip = 100;
    cfg->backend_port = 24;
}

bool lmtp_proxy_config_read(const struct cfg_ctx *ctx, const struct ynode *node,
                            struct lmtp_proxy_config *cfg)
{
    static const char *const keys[] = {LMTP_CONFIG_SHARED_KEYS, "backend_port", NULL};
    if (node == NULL)
        return true;
    if (!cfg_expect_map(ctx, node, P) || !cfg_check_keys(ctx, node, P, keys) ||
        !lmtp_config_read_values(ctx, node, P, &cfg->front) ||
        !cfg_int(ctx, node, P, "backend_port", 1, 65535, &cfg->backend_port))
        return false;
    cfg->enabled = true;
    return lmtp_config_check_required(ctx, node, P, &cfg->front);
}

void lmtp_proxy_config_print(const struct lmtp_proxy_config *cfg, FILE *out)
{
    if (!cfg->enabled)
        return;
    const struct lmtp_config *f = &cfg->front;
    const char *in = "    ";
    fputs("  lmtp:\n", out);
    lmtp_config_print_shared_head(f, out, in);
    fprintf(out,
            "    max_message_size: %lld\n    max_recipients: %lld\n    max_line_length: %lld\n"
            "    max_connections: %lld\n    max_errors: %lld\n    command_timeout: %lldms\n"
            "    auth_timeout: %lldms\n",
            (long long)f->max_message_size, (long long)f->max_recipients,
            (long long)f->max_line_length, (long long)f->max_connections, (long long)f->max_errors,
            (long long)f->command_timeout_ms, (long long)f->auth_timeout_ms);
    fprintf(out, "    max_connections_per_ip: %lld\n", (long long)f->max_connections_per_ip);
    yaml_put_kv(out, in, "temp_dir", f->temp_dir);
    fprintf(out, "    backend_port: %lld\n", (long long)cfg->backend_port);
}

void lmtp_proxy_config_free(struct lmtp_proxy_config *cfg)
{
    lmtp_config_free(&cfg->front);
    memset(cfg, 0, sizeof(*cfg));
}
