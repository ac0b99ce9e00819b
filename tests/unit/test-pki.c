/* The unit tests' throwaway TLS material (test-pki.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test-pki.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void make_pki(struct pki *k)
{
    snprintf(k->dir, sizeof(k->dir), "/tmp/petrel-tls-XXXXXX");
    assert_non_null(mkdtemp(k->dir));
    snprintf(k->cert, sizeof(k->cert), "%s/cert.pem", k->dir);
    snprintf(k->key, sizeof(k->key), "%s/key.pem", k->dir);
    EVP_PKEY *pkey = EVP_EC_gen("P-256");
    assert_non_null(pkey);
    X509 *x = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, pkey);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1,
                               0);
    X509_set_issuer_name(x, name);
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    const char *exts[][2] = {{"basicConstraints", "critical,CA:TRUE"},
                             {"keyUsage", "critical,digitalSignature,keyCertSign"},
                             {"subjectAltName", "DNS:localhost,IP:127.0.0.1"}};
    for (size_t i = 0; i < 3; i++) {
        X509_EXTENSION *ext = X509V3_EXT_conf(NULL, &v3, exts[i][0], exts[i][1]);
        assert_non_null(ext);
        X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
    }
    assert_true(X509_sign(x, pkey, EVP_sha256()) > 0);
    FILE *f = fopen(k->cert, "w");
    PEM_write_X509(f, x);
    fclose(f);
    f = fopen(k->key, "w");
    PEM_write_PrivateKey(f, pkey, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    X509_free(x);
    EVP_PKEY_free(pkey);
}

void free_pki(struct pki *k)
{
    unlink(k->cert);
    unlink(k->key);
    rmdir(k->dir);
}
