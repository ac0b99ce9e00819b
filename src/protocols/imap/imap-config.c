/* The `imap:` section: the keys every mail protocol has
 * (protocols/common/mail-login-config.h) and IMAP's own limits. */
#include "protocols/imap/imap-config.h"

#include <string.h>
#include <unistd.h>

#define IMAP_MAX_WORKERS 64
#define IMAP_AUTO_WORKERS_PER_CPU 8
/* Each loop holds an inotify instance, and the kernel's default is 128 per
 * user for every process of that user. */
#define IMAP_AUTO_WORKERS_MAX 32

const struct mail_login_section imap_config_section = {
    .name = "imap",
    .listen = ":143",
    .max_connections_per_user = 20,
    .idle_timeout_ms = 30 * 60 * 1000,
    .min_idle_timeout_ms = 1000,
};

void imap_config_defaults(struct imap_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    mail_login_config_defaults(&cfg->login, &imap_config_section);
    cfg->max_line_length = 64 * 1024;
    cfg->max_literal_size = 64 * 1024 * 1024;
    cfg->workers = 0;
    cfg->imap_quota = true;
}

unsigned imap_config_workers(const struct imap_config *cfg)
{
    if (cfg->workers > 0)
        return (unsigned)cfg->workers;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    long n = cpus * IMAP_AUTO_WORKERS_PER_CPU;
    return (unsigned)(n > IMAP_AUTO_WORKERS_MAX ? IMAP_AUTO_WORKERS_MAX : n);
}

void imap_config_free(struct imap_config *cfg)
{
    mail_login_config_free(&cfg->login);
    memset(cfg, 0, sizeof(*cfg));
}

bool imap_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool required,
                      struct imap_config *cfg)
{
    static const char *const keys[] = {MAIL_LOGIN_CONFIG_KEYS, "max_line_length",
                                       "max_literal_size",     "workers",
                                       "imap_quota",           NULL};
    const char *p = imap_config_section.name;
    if (!cfg_expect_map(ctx, node, p) || !cfg_check_keys(ctx, node, p, keys))
        return false;
    return mail_login_config_read_endpoints(ctx, node, &imap_config_section, &cfg->login) &&
           cfg_int(ctx, node, p, "max_line_length", 1024, 16 * 1024 * 1024,
                   &cfg->max_line_length) &&
           cfg_int(ctx, node, p, "max_literal_size", 1024, (int64_t)4 << 30,
                   &cfg->max_literal_size) &&
           cfg_int(ctx, node, p, "workers", 0, IMAP_MAX_WORKERS, &cfg->workers) &&
           cfg_bool(ctx, node, p, "imap_quota", &cfg->imap_quota) &&
           mail_login_config_read_limits(ctx, node, &imap_config_section, &cfg->login) &&
           mail_login_config_read_timeouts(ctx, node, &imap_config_section, &cfg->login) &&
           mail_login_config_check(ctx, node, &imap_config_section, required, &cfg->login);
}

void imap_config_print(const struct imap_config *cfg, FILE *out)
{
    fputs("imap:\n", out);
    mail_login_config_print_endpoints(&cfg->login, out);
    fprintf(out,
            "  disable_plaintext_auth: %s\n  max_line_length: %lld\n  max_literal_size: %lld\n"
            "  workers: %lld%s\n",
            cfg->login.disable_plaintext_auth ? "true" : "false", (long long)cfg->max_line_length,
            (long long)cfg->max_literal_size, (long long)cfg->workers,
            cfg->workers == 0 ? "  # auto" : "");
    fprintf(out, "  imap_quota: %s\n", cfg->imap_quota ? "true" : "false");
    mail_login_config_print_limits(&cfg->login, out);
    mail_login_config_print_timeouts(&cfg->login, out);
}
