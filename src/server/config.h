/* Petrel's typed configuration: the whole of petrel.yaml after validation,
 * defaults and environment overrides. Loading stops at the first problem
 * with `file:line: key: message`. Each component section is read by the
 * owning module's reader; this file wires them together. */
#ifndef PETREL_SERVER_CONFIG_H
#define PETREL_SERVER_CONFIG_H

#include "core/error.h"
#include "core/log.h"
#include "dict/dict.h"
#include "storage/namespace.h"
#include "storage/quota/quota-config.h"
#include "net/tls.h"
#include "protocols/imap/imap-config.h"
#include "protocols/lmtp/lmtp-config.h"
#include "protocols/pop3/pop3-config.h"
#include "services/auth/auth-service.h"
#include "services/backend-api/backend-api.h"
#include "services/director/director-config.h"
#include "services/monitor/monitor-config.h"
#include "services/telemetry/telemetry.h"
#include "services/warden/warden-config.h"
#include "server/login-config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CONFIG_MAX_LIST 256

struct petrel_config {
    char *file;
    char **components; /* NULL-terminated, validated names */
    struct log_levels log;
    char *user;
    char *group;
    bool allow_root;
    int64_t shutdown_timeout_ms;
    int64_t memory_trim_interval_ms; /* malloc_trim from a timer; 0: never */
    struct telemetry_config telemetry;
    struct tls_config internal_tls;
    struct backend_api_config backend_api;
    struct auth_config auth;
    struct imap_config imap;
    struct lmtp_config lmtp;
    struct pop3_config pop3;
    struct warden_config warden; /* `warden_service:` section */
    struct dict_settings *dicts; /* `dicts:` section; the daemon's registry is made from it */
    struct mail_config mail;     /* `mail:` section */
    struct monitor_config monitor; /* `monitor:` section; the monitor file once loaded */
    struct director_config director; /* `director:` section */
    struct quota_config quota;       /* `quota:` section */
    struct login_config login;       /* `login:` section */
};

/* Loads `path`; applies environment overrides (LOG_LEVEL, PETREL_COMPONENT).
 * Returns NULL with the message in err. */
struct petrel_config *config_load(const char *path, struct petrel_error *err);
/* Same from text (tests and fuzzing); `name` is used in messages. */
struct petrel_config *config_parse(const char *name, const char *text, size_t len,
                                   struct petrel_error *err);
void config_free(struct petrel_config *cfg);
/* True when `component` is enabled. */
bool config_has_component(const struct petrel_config *cfg, const char *component);
/* Writes the effective configuration as YAML (secrets never included). */
void config_print(const struct petrel_config *cfg, FILE *out);

#endif
