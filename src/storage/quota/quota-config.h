/* The `quota:` configuration section (document 3's site-wide options,
 * docs/configuration.md, docs/quota.md), including `quota.quota_status`,
 * the settings of the Postfix policy service (component `quota-status`).
 * Read by every process (the engine's options matter wherever mail is
 * saved); strings are owned by the struct. */
#ifndef PETREL_STORAGE_QUOTA_CONFIG_H
#define PETREL_STORAGE_QUOTA_CONFIG_H

#include "core/cfg-read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define QUOTA_MAX_WARNINGS 32
#define QUOTA_MAX_CLONE_DICTS 16
#define QUOTA_STATUS_MAX_LISTEN 16

enum quota_warning_threshold { QUOTA_WARN_OVER, QUOTA_WARN_UNDER };

struct quota_warning_config {
    char *name;
    int resource; /* enum quota_resource */
    enum quota_warning_threshold threshold;
    int64_t percentage;
    char *execute; /* bare program name inside quota_warning_bin_dir */
};

struct quota_status_config {
    char **listen;       /* "host:port" or "unix:/path"; NULL-terminated */
    char **allowed_nets; /* TCP clients admitted */
    int64_t socket_mode;
    int64_t max_connections;
    int64_t max_connections_per_ip;
    int64_t handshake_timeout_ms;
    int64_t idle_timeout_ms;
    int64_t max_line_length;   /* one `name=value` line */
    int64_t max_request_bytes; /* one request (all its lines) */
    int64_t max_pipelined;     /* requests read ahead of their replies, per connection */
    char *auth_addr;           /* the auth service (userdb lookups) */
    int64_t auth_timeout_ms;
    char *recipient_delimiter; /* characters that start the detail part */
    char *username_format;     /* %u %n %d as lmtp.username_format */
};

struct quota_config {
    bool enabled;
    char *quota_name;
    char *exceeded_message;
    uint64_t mail_size; /* quota_mail_size; 0 = unlimited */
    int64_t storage_percentage;
    int64_t message_percentage;
    uint64_t storage_extra;
    uint64_t storage_grace;
    bool ignore_unlimited;
    bool hidden;
    int64_t mailbox_count;         /* 0 = unlimited */
    int64_t mailbox_message_count; /* 0 = unlimited */
    char **clone_dicts;            /* NULL-terminated */
    int64_t clone_flush_delay_ms;
    char *warning_bin_dir; /* NULL = none */
    int64_t warning_exec_timeout_ms;
    struct quota_warning_config *warnings;
    size_t warning_count;
    char *over_status_mask; /* "" disables the over-flag sync */
    bool over_status_lazy_check;
    char *over_status_execute; /* NULL = none */
    /* Postfix policy answers (without "action="). */
    char *status_success;   /* quota_status_success, default DUNNO */
    char *status_nouser;    /* quota_status_nouser; "" answers DUNNO */
    char *status_overquota; /* quota_status_overquota */
    char *status_toolarge;  /* quota_status_toolarge; "" = status_overquota */
    struct quota_status_config status;
};

void quota_config_defaults(struct quota_config *cfg);
/* Reads `node` (the `quota:` map; NULL keeps the defaults). `status_required`:
 * the quota-status component runs here, so quota_status.listen must name an
 * address and quota_status.auth_addr the auth service. */
bool quota_config_read(const struct cfg_ctx *ctx, const struct ynode *node, bool status_required,
                       struct quota_config *cfg);
void quota_config_free(struct quota_config *cfg);
void quota_config_print(const struct quota_config *cfg, FILE *out);
const char *quota_warning_threshold_name(enum quota_warning_threshold t);

#endif
