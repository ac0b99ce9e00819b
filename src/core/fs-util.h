/* Small filesystem helpers with crash-safe semantics. Paths are built by
 * callers from validated names only. */
#ifndef PETREL_CORE_FS_UTIL_H
#define PETREL_CORE_FS_UTIL_H

#include "core/error.h"

#include <stdbool.h>
#include <sys/stat.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p with `mode` for every created level. */
bool fs_mkdir_p(const char *path, mode_t mode, struct petrel_error *err);
/* A new empty file in `dir` with no name (O_TMPFILE, or where the file
 * system has none a mkstemp name unlinked at once), open read-write, mode
 * 0600: it goes with its last descriptor, also when the process is killed,
 * so nothing is left to clean. *linkable: an O_TMPFILE one, which linkat()
 * (through /proc/self/fd) can still give a name. -1 with `err` set. */
int fs_tmpfile_open(const char *dir, bool *linkable, struct petrel_error *err);
/* fsyncs a directory (so a rename or create in it is durable). */
bool fs_fsync_dir(const char *path, struct petrel_error *err);
/* Writes `len` bytes to `path` through "<path>.tmp.<pid>": write, fsync (when
 * `fsync`), rename, fsync the directory. */
bool fs_write_atomic(const char *path, const void *data, size_t len, bool fsync,
                     struct petrel_error *err);
/* The *_at variants reach the file through an open directory: with dir_fd
 * AT_FDCWD they take `path` as it is; otherwise the file is `path`'s last
 * component inside dir_fd, and `path` only names it in error messages. */
const char *fs_at_name(int dir_fd, const char *path);
bool fs_fsync_dir_at(int dir_fd, const char *path, struct petrel_error *err);
/* The rest of `path` after "<dir>/" when it starts so (what a *at call takes
 * with a descriptor of `dir`), else `path` itself. */
const char *fs_path_under(const char *dir, const char *path);
bool fs_write_atomic_at(int dir_fd, const char *path, const void *data, size_t len, bool fsync,
                        struct petrel_error *err);
/* pwrite()s all `len` bytes at `offset`, retrying short writes and EINTR.
 * False with errno set on failure (a zero-byte write is EIO). */
bool fs_pwrite_all(int fd, const void *data, size_t len, uint64_t offset);
/* pread()s up to `len` bytes at `offset` into `data`, retrying short reads
 * and EINTR, until `len` or the end of the file; *got says how many came.
 * False with errno set on a read error (*got is what came before it). */
bool fs_pread_all(int fd, void *data, size_t len, uint64_t offset, size_t *got);
/* Reads a whole file (at most max bytes) into a fresh NUL-terminated
 * allocation. A missing file is PETREL_ERR_NOT_FOUND. */
bool fs_read_file(const char *path, size_t max, char **data, size_t *len, struct petrel_error *err);
/* Reads a whole regular file of at most `max` bytes into a fresh
 * NUL-terminated allocation, without following a symbolic link or blocking
 * on a FIFO put in its place (files in a user's mail directory). 1 with
 * *data and *len (and its stat in *st_out when not NULL); 0 when it is
 * missing (ENOENT, ENOTDIR); -1 with err: "cannot open the <what>", "the
 * <what> is not a regular file" (IO), "the <what> is larger than <max>
 * bytes" (INVALID). */
int fs_read_regular_file(const char *path, const char *what, size_t max, char **data, size_t *len,
                         struct stat *st_out, struct petrel_error *err);
bool fs_read_file_at(int dir_fd, const char *path, size_t max, char **data, size_t *len,
                     struct petrel_error *err);
/* Removes a directory tree without following symbolic links. */
bool fs_remove_tree(const char *path, struct petrel_error *err);
/* The directory part of a path (fresh allocation; "." when none). */
char *fs_dirname(const char *path);

#endif
