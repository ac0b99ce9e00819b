/* A storage module for the tests only: it refuses every save (append,
 * copy, move) into the folders of one user with PETREL_ERR_OVER_QUOTA, so
 * the end-to-end tests can prove that each front end takes a module's
 * veto and answers with its own protocol's error, before a byte is
 * written. Compiled only when the build enables test modules (meson
 * option test_modules: on in debug builds, off in release builds), and
 * registered only when the daemon starts with PETREL_TEST_VETO_SAVE set to
 * that user's name (docs/storage.md). */
#ifndef PETREL_STORAGE_TEST_VETO_MODULE_H
#define PETREL_STORAGE_TEST_VETO_MODULE_H

#include "storage/mail-storage-module.h"

/* The environment variable the daemon reads once at start-up. */
#define TEST_VETO_SAVE_ENV "PETREL_TEST_VETO_SAVE"

/* ctx: the user name (a NUL-terminated string that outlives the storage). */
extern const struct mail_storage_module test_veto_save_module;

#endif
