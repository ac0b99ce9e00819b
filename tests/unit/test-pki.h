/* A throwaway TLS key and certificate for unit tests that run real TLS:
 * a self-signed P-256 certificate for "localhost" and 127.0.0.1, which is
 * also the CA a client verifies it with, written to a fresh directory
 * under /tmp. */
#ifndef PETREL_TESTS_UNIT_TEST_PKI_H
#define PETREL_TESTS_UNIT_TEST_PKI_H

struct pki {
    char dir[64];
    char cert[96];
    char key[96];
};

/* Makes the key and certificate (cmocka assertions on failure). */
void make_pki(struct pki *k);

/* Removes the files and the directory. */
void free_pki(struct pki *k);

#endif
