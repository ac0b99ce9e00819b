#include "net/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool ssl_fail(struct petrel_error *err, const char *what, const char *file)
{
    unsigned long e = ERR_get_error();
    char reason[256] = "unknown error";
    if (e != 0)
        ERR_error_string_n(e, reason, sizeof(reason));
    ERR_clear_error();
    return petrel_error_set(err, PETREL_ERR_IO, "%s %s: %s", what, file != NULL ? file : "",
                            reason);
}

static bool readable(const char *path, const char *what, struct petrel_error *err)
{
    if (access(path, R_OK) != 0)
        return petrel_error_set(err, PETREL_ERR_IO, "cannot read %s %s: %s", what, path,
                                strerror(errno));
    return true;
}

/* OpenSSL keeps a connection's 16 KiB read and write buffers for its whole
 * life unless told otherwise: about 12 KiB of every idle TLS connection
 * (an IMAP IDLE, a relayed session in the login proxy) is buffers holding
 * nothing. With SSL_MODE_RELEASE_BUFFERS they are freed once empty and
 * taken again from the allocator for the next record, as nginx does for
 * every context it makes. The last record read (a LOGIN with its
 * password) would then stay in freed heap memory rather than in a live
 * buffer: SSL_OP_CLEANSE_PLAINTEXT wipes decrypted input once it has been
 * handed over. */
static void release_idle_buffers(SSL_CTX *ctx)
{
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_options(ctx, SSL_OP_CLEANSE_PLAINTEXT);
}

SSL_CTX *tls_server_ctx_new(const struct tls_server_options *opts, struct petrel_error *err)
{
    if (opts->cert_file == NULL || *opts->cert_file == '\0' || opts->key_file == NULL ||
        *opts->key_file == '\0') {
        petrel_error_set(err, PETREL_ERR_INVALID, "TLS needs cert_file and key_file");
        return NULL;
    }
    if (!readable(opts->cert_file, "certificate", err) || !readable(opts->key_file, "key", err))
        return NULL;
    bool has_ca = opts->ca_file != NULL && *opts->ca_file != '\0';
    if (has_ca && !readable(opts->ca_file, "CA file", err))
        return NULL;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        ssl_fail(err, "cannot create TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    release_idle_buffers(ctx);
    if (SSL_CTX_use_certificate_chain_file(ctx, opts->cert_file) != 1) {
        ssl_fail(err, "cannot load certificate", opts->cert_file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, opts->key_file, SSL_FILETYPE_PEM) != 1) {
        ssl_fail(err, "cannot load key", opts->key_file);
        goto fail;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ssl_fail(err, "key does not match certificate", opts->key_file);
        goto fail;
    }
    if (has_ca) {
        if (SSL_CTX_load_verify_locations(ctx, opts->ca_file, NULL) != 1) {
            ssl_fail(err, "cannot load CA", opts->ca_file);
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(opts->ca_file);
        if (names != NULL)
            SSL_CTX_set_client_CA_list(ctx, names);
        int mode = SSL_VERIFY_PEER;
        if (opts->require_client_cert)
            mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        SSL_CTX_set_verify(ctx, mode, NULL);
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

SSL_CTX *tls_client_ctx_new(const char *ca_file, const char *cert_file, const char *key_file,
                            struct petrel_error *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        ssl_fail(err, "cannot create TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    release_idle_buffers(ctx);
    if (ca_file != NULL && *ca_file != '\0') {
        if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
            ssl_fail(err, "cannot load CA", ca_file);
            SSL_CTX_free(ctx);
            return NULL;
        }
    } else {
        SSL_CTX_set_default_verify_paths(ctx);
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (cert_file != NULL && *cert_file != '\0') {
        if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
            ssl_fail(err, "cannot load client certificate", cert_file);
            SSL_CTX_free(ctx);
            return NULL;
        }
    }
    return ctx;
}
