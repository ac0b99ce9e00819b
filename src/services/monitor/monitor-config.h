/* The health monitor's configuration (docs/monitor.md, docs/configuration.md#monitor).
 *
 * Two places: petrel.yaml's `monitor:` section names the file
 * (`config_file`), and the monitor file itself (by default
 * /etc/petrel/monitor.yaml; the environment variable MONITOR_CONFIG wins
 * over both) holds every key of specification document 2's table plus
 * Petrel's own additions. Durations are seconds as integers (`10`) or
 * duration strings (`10s`, `500ms`), so tests can use sub-second
 * intervals. Errors are `file:line: key: message`; passwords are never
 * printed or logged. The struct owns every string in it. */
#ifndef PETREL_SERVICES_MONITOR_CONFIG_H
#define PETREL_SERVICES_MONITOR_CONFIG_H

#include "core/cfg-read.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MONITOR_CONFIG_DEFAULT_FILE "/etc/petrel/monitor.yaml"
#define MONITOR_CONFIG_ENV "MONITOR_CONFIG"
#define MONITOR_MAX_TAGS 1024
#define MONITOR_MAX_TAG_LEN 255
#define MONITOR_MAX_CREDENTIAL_LEN 1024

/* Which flushed backends a successful probe brings back with BACKEND-UP. */
enum monitor_restore {
    MONITOR_RESTORE_ANY, /* every backend the director holds in flush (the specification) */
    MONITOR_RESTORE_OWN, /* only backends this monitor flushed itself */
};

/* Credentials of one tag (`tags:` entry). */
struct monitor_credentials {
    char *tag; /* "" is the fallback for untagged backends and unknown tags */
    char *user;
    char *password;
};

struct monitor_config {
    /* petrel.yaml `monitor:` section */
    char *config_file; /* NULL: MONITOR_CONFIG or the default path */
    /* the monitor file; `file` is set once monitor_config_load() succeeded */
    char *file;
    char *director_addr;
    char *director_secret_file; /* the director's ring secret; "" = see director_secret_env */
    char *director_secret_env;  /* variable holding it (or `<name>_FILE` naming its file) */
    bool poll_imap;
    int64_t imap_port;
    bool imap_tls; /* resolved: the `imap_tls` key, else imap_port == 993 */
    bool poll_pop3;
    int64_t pop3_port;
    bool pop3_tls; /* resolved: the `pop3_tls` key, else pop3_port == 995 */
    bool poll_lmtp;
    int64_t lmtp_port;
    char *tls_ca_file; /* NULL: backend certificates are not verified */
    int64_t interval_ms;
    int64_t timeout_ms;
    int64_t rapid_interval_ms;
    int64_t retry_count;
    int64_t rapid_rounds;
    int64_t rapid_fails_needed;
    enum monitor_restore restore;
    int64_t max_backends;
    int64_t max_line_length;
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t ping_interval_ms; /* director link keep-alive and silence bound */
    struct monitor_credentials *tags;
    size_t tag_count;
};

/* Every default of the table (the file has not been read yet). */
void monitor_config_defaults(struct monitor_config *cfg);
void monitor_config_free(struct monitor_config *cfg);

/* Reads petrel.yaml's `monitor:` map (NULL keeps the defaults): only
 * `config_file`. */
bool monitor_section_read(const struct cfg_ctx *ctx, const struct ynode *node,
                          struct monitor_config *cfg);

/* The path monitor_config_load() reads: MONITOR_CONFIG when set and not
 * empty, else `config_file`, else MONITOR_CONFIG_DEFAULT_FILE. Borrowed. */
const char *monitor_config_path(const struct monitor_config *cfg);

/* Reads the monitor file from monitor_config_path() into `cfg`. Idempotent:
 * a second call after a success does nothing. On failure returns false with
 * `file:line: key: message` (or `file: cannot open: ...`) in err. */
bool monitor_config_load(struct monitor_config *cfg, struct petrel_error *err);

/* Same from text (tests, fuzzing); `name` is used in messages. */
bool monitor_config_parse(struct monitor_config *cfg, const char *name, const char *text,
                          size_t len, struct petrel_error *err);

/* The credentials for a backend's tag: the tag's entry, else the "" entry,
 * else NULL (probes then connect and read the greeting only). Borrowed. */
const struct monitor_credentials *monitor_config_credentials(const struct monitor_config *cfg,
                                                             const char *tag);

/* Writes the `monitor:` section of --check-config; passwords are shown
 * only as "(set)". */
void monitor_config_print(const struct monitor_config *cfg, FILE *out);

#endif
