/* OpenSSL contexts for Petrel listeners and clients. A server context with a
 * CA file verifies client certificates (mTLS): a client without a valid
 * certificate is refused during the handshake. */
#ifndef PETREL_NET_TLS_H
#define PETREL_NET_TLS_H

#include "core/error.h"

#include <openssl/ssl.h>
#include <stdbool.h>

/* The `internal_tls` configuration section (cluster-internal listeners). */
struct tls_config {
    bool enabled;
    char *cert_file;
    char *key_file;
    char *ca_file;
    bool require_client_cert; /* default true when ca_file is set (mTLS) */
};

struct tls_server_options {
    const char *cert_file;
    const char *key_file;
    const char *ca_file;      /* NULL/"" = no client certificates requested */
    bool require_client_cert; /* with ca_file: refuse clients without one */
};

/* Loads certificate, key and CA; errors name the file and OpenSSL's reason. */
SSL_CTX *tls_server_ctx_new(const struct tls_server_options *opts, struct petrel_error *err);
/* A client context verifying the server against `ca_file` (system store when NULL);
 * optional client certificate for mTLS. */
SSL_CTX *tls_client_ctx_new(const char *ca_file, const char *cert_file, const char *key_file,
                            struct petrel_error *err);

#endif
