/* The configuration keys the mail protocol servers share (today `imap:` and
 * `pop3:`; docs/configuration.md): where they listen, the TLS files, the
 * auth service and the warden, the plaintext-authentication policy, the
 * connection limits and the session timeouts.
 *
 * A protocol's config struct embeds `struct mail_login_config` and its
 * reader calls the pieces below in the order its keys are read, adding its
 * own keys in between; `struct mail_login_section` carries what differs
 * between sections (the name used in error paths, a few defaults and
 * bounds). Errors have the form `file:line: <section>.<key>: message`
 * (core/cfg-read.h). Strings are owned by the struct and freed by
 * mail_login_config_free(). */
#ifndef PETREL_PROTOCOLS_COMMON_MAIL_LOGIN_CONFIG_H
#define PETREL_PROTOCOLS_COMMON_MAIL_LOGIN_CONFIG_H

#include "core/cfg-read.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct mail_login_config {
    char **listen;     /* plain listeners (STARTTLS/STLS offered when a certificate is set) */
    char **listen_tls; /* implicit-TLS listeners (993/995-style) */
    char *tls_cert_file;
    char *tls_key_file;
    char *auth_addr;             /* the auth service */
    char *warden_addr;           /* the session registry; "" = sessions are not registered */
    bool disable_plaintext_auth; /* refuse plaintext logins on plain connections from elsewhere */
    int64_t max_connections;
    int64_t max_connections_per_user; /* 0 = no limit */
    int64_t max_connections_per_ip;   /* 0 = no limit */
    char **per_ip_limit_exempt_nets;  /* CIDRs not counted per address */
    /* CIDRs of login proxies: their ID/XCLIENT forwarding of the client's
     * address is believed, and they count as secure for plaintext logins
     * (Dovecot's login_trusted_networks). Empty by default. */
    char **login_trusted_networks;
    int64_t login_timeout_ms;         /* before authentication */
    int64_t idle_timeout_ms;          /* authenticated, between commands */
    int64_t auth_timeout_ms;          /* one call to the auth service (or the warden) */
};

/* What differs between the sections that use these keys. */
struct mail_login_section {
    const char *name;                 /* "imap": the section, and the prefix of error paths */
    const char *listen;               /* the default plain listener (":143") */
    int64_t max_connections_per_user; /* default */
    int64_t idle_timeout_ms;          /* default */
    int64_t min_idle_timeout_ms;      /* the smallest idle_timeout accepted */
};

/* The keys read here, for the section's list of allowed keys. */
#define MAIL_LOGIN_CONFIG_KEYS                                                                     \
    "listen", "listen_tls", "tls_cert_file", "tls_key_file", "auth_addr", "warden_addr",           \
        "disable_plaintext_auth", "max_connections", "max_connections_per_user",                   \
        "max_connections_per_ip", "per_ip_limit_exempt_nets", "login_trusted_networks",            \
        "login_timeout", "idle_timeout", "auth_timeout"

/* Fills `cfg` with the defaults (one plain listener `sec->listen`, the auth
 * service on 127.0.0.1:10200, no warden, plaintext refused off secure
 * peers, 10000 connections, 60 s to log in, 30 s per auth call). */
void mail_login_config_defaults(struct mail_login_config *cfg,
                                const struct mail_login_section *sec);
/* Reads listen and listen_tls (each entry must be an address), the TLS
 * files, auth_addr, warden_addr ("" or an address) and
 * disable_plaintext_auth from the section map `node` (already checked to
 * be a map with known keys). False with ctx->err set on the first bad
 * value; absent keys keep their values. */
bool mail_login_config_read_endpoints(const struct cfg_ctx *ctx, const struct ynode *node,
                                      const struct mail_login_section *sec,
                                      struct mail_login_config *cfg);
/* Reads max_connections (1..10000000), max_connections_per_user
 * (0..100000), max_connections_per_ip (0..10000000),
 * per_ip_limit_exempt_nets and login_trusted_networks (CIDRs). */
bool mail_login_config_read_limits(const struct cfg_ctx *ctx, const struct ynode *node,
                                   const struct mail_login_section *sec,
                                   struct mail_login_config *cfg);
/* Reads login_timeout (1 s..1 h), idle_timeout (sec->min_idle_timeout_ms..
 * 24 h) and auth_timeout (100 ms..10 min). */
bool mail_login_config_read_timeouts(const struct cfg_ctx *ctx, const struct ynode *node,
                                     const struct mail_login_section *sec,
                                     struct mail_login_config *cfg);
/* After every key is read: the TLS files go together; when `required` (the
 * component runs) a listener must exist, listen_tls needs the TLS files
 * and auth_addr must be set. */
bool mail_login_config_check(const struct cfg_ctx *ctx, const struct ynode *node,
                             const struct mail_login_section *sec, bool required,
                             const struct mail_login_config *cfg);

/* --check-config output, two-space indented, in the pieces a section
 * interleaves with its own keys: listen, listen_tls, tls_cert_file,
 * tls_key_file, auth_addr, warden_addr (disable_plaintext_auth is printed
 * by the section, whose place for it differs) ... */
void mail_login_config_print_endpoints(const struct mail_login_config *cfg, FILE *out);
/* ... max_connections, max_connections_per_user ... */
void mail_login_config_print_limits(const struct mail_login_config *cfg, FILE *out);
/* ... login_timeout, idle_timeout, auth_timeout (in ms). */
void mail_login_config_print_timeouts(const struct mail_login_config *cfg, FILE *out);

/* Frees the strings and zeroes `cfg`. */
void mail_login_config_free(struct mail_login_config *cfg);

#endif
