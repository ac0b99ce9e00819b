#include "core/fs-util.h"

#include "core/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool fs_mkdir_p(const char *path, mode_t mode, struct petrel_error *err)
{
    char *copy = xstrdup(path);
    size_t len = strlen(copy);
    for (size_t i = 1; i <= len; i++) {
        if (copy[i] != '/' && copy[i] != '\0')
            continue;
        char saved = copy[i];
        copy[i] = '\0';
        if (mkdir(copy, mode) != 0 && errno != EEXIST) {
            petrel_error_set_errno(err, errno, "cannot create %s: %s", copy, strerror(errno));
            free(copy);
            return false;
        }
        copy[i] = saved;
    }
    struct stat st;
    bool ok = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (!ok)
        petrel_error_set(err, PETREL_ERR_IO, "%s is not a directory", path);
    free(copy);
    return ok;
}

bool fs_fsync_dir(const char *path, struct petrel_error *err)
{
    return fs_fsync_dir_at(AT_FDCWD, path, err);
}

bool fs_fsync_dir_at(int dir_fd, const char *path, struct petrel_error *err)
{
    int fd = openat(dir_fd, fs_at_name(dir_fd, path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return petrel_error_set_errno(err, errno, "cannot open %s: %s", path, strerror(errno));
    bool ok = fsync(fd) == 0;
    if (!ok)
        petrel_error_set_errno(err, errno, "fsync %s: %s", path, strerror(errno));
    close(fd);
    return ok;
}

char *fs_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return xstrdup(".");
    if (slash == path)
        return xstrdup("/");
    return xstrndup(path, (size_t)(slash - path));
}

const char *fs_at_name(int dir_fd, const char *path)
{
    if (dir_fd == AT_FDCWD)
        return path;
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

const char *fs_path_under(const char *dir, const char *path)
{
    size_t n = strlen(dir);
    if (strncmp(path, dir, n) == 0 && path[n] == '/')
        return path + n + 1;
    return path;
}

bool fs_write_atomic(const char *path, const void *data, size_t len, bool fsync_data,
                     struct petrel_error *err)
{
    return fs_write_atomic_at(AT_FDCWD, path, data, len, fsync_data, err);
}

bool fs_write_atomic_at(int dir_fd, const char *path, const void *data, size_t len, bool fsync_data,
                        struct petrel_error *err)
{
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    int fd =
        openat(dir_fd, fs_at_name(dir_fd, tmp), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        petrel_error_set_errno(err, errno, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return false;
    }
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            petrel_error_set_errno(err, w < 0 ? errno : ENOSPC, "write %s: %s", tmp,
                                   w < 0 ? strerror(errno) : "short write");
            goto fail;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync_data && fsync(fd) != 0) {
        petrel_error_set_errno(err, errno, "fsync %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        petrel_error_set_errno(err, errno, "close %s: %s", tmp, strerror(errno));
        goto fail;
    }
    fd = -1;
    if (renameat(dir_fd, fs_at_name(dir_fd, tmp), dir_fd, fs_at_name(dir_fd, path)) != 0) {
        petrel_error_set_errno(err, errno, "rename %s: %s", path, strerror(errno));
        goto fail;
    }
    free(tmp);
    if (fsync_data && dir_fd != AT_FDCWD) {
        if (fsync(dir_fd) == 0)
            return true;
        return petrel_error_set_errno(err, errno, "fsync the directory of %s: %s", path,
                                      strerror(errno));
    }
    if (fsync_data) {
        char *dir = fs_dirname(path);
        bool ok = fs_fsync_dir(dir, err);
        free(dir);
        return ok;
    }
    return true;
fail:
    if (fd >= 0)
        close(fd);
    unlinkat(dir_fd, fs_at_name(dir_fd, tmp), 0);
    free(tmp);
    return false;
}

bool fs_pwrite_all(int fd, const void *data, size_t len, uint64_t offset)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)offset);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        if (n == 0) {
            errno = EIO;
            return false;
        }
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return true;
}

bool fs_pread_all(int fd, void *data, size_t len, uint64_t offset, size_t *got)
{
    char *p = data;
    *got = 0;
    while (*got < len) {
        ssize_t r = pread(fd, p + *got, len - *got, (off_t)(offset + *got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return true;
}

/* Reads up to `size` bytes of `fd` into a NUL-terminated buffer and closes
 * it; a read error keeps what came before it. */
static void read_and_close(int fd, size_t size, char **data, size_t *len)
{
    char *buf = xmalloc(size + 1);
    size_t got = 0;
    (void)fs_pread_all(fd, buf, size, 0, &got);
    close(fd);
    buf[got] = '\0';
    *data = buf;
    *len = got;
}

bool fs_read_file(const char *path, size_t max, char **data, size_t *len, struct petrel_error *err)
{
    return fs_read_file_at(AT_FDCWD, path, max, data, len, err);
}

bool fs_read_file_at(int dir_fd, const char *path, size_t max, char **data, size_t *len,
                     struct petrel_error *err)
{
    int fd = openat(dir_fd, fs_at_name(dir_fd, path), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return petrel_error_set(err, errno == ENOENT ? PETREL_ERR_NOT_FOUND : PETREL_ERR_IO,
                                "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size > max) {
        close(fd);
        return petrel_error_set(err, PETREL_ERR_IO, "%s: larger than %zu bytes or unreadable", path,
                                max);
    }
    read_and_close(fd, (size_t)st.st_size, data, len);
    return true;
}

int fs_read_regular_file(const char *path, const char *what, size_t max, char **data, size_t *len,
                         struct stat *st_out, struct petrel_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        petrel_error_set_errno(err, errno, "cannot open the %s", what);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        petrel_error_set(err, PETREL_ERR_IO, "the %s is not a regular file", what);
        return -1;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        petrel_error_set(err, PETREL_ERR_INVALID, "the %s is larger than %zu bytes", what, max);
        return -1;
    }
    read_and_close(fd, (size_t)st.st_size, data, len);
    if (st_out != NULL)
        *st_out = st;
    return 1;
}

static bool remove_at(int parent, const char *name, struct petrel_error *err)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOTDIR || errno == ELOOP) {
            if (unlinkat(parent, name, 0) != 0 && errno != ENOENT)
                return petrel_error_set_errno(err, errno, "unlink %s: %s", name, strerror(errno));
            return true;
        }
        if (errno == ENOENT)
            return true;
        return petrel_error_set_errno(err, errno, "open %s: %s", name, strerror(errno));
    }
    DIR *dir = fdopendir(fd);
    if (dir == NULL) {
        close(fd);
        return petrel_error_set_errno(err, errno, "opendir %s: %s", name, strerror(errno));
    }
    bool ok = true;
    struct dirent *de;
    while (ok && (de = readdir(dir)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        ok = remove_at(dirfd(dir), de->d_name, err);
    }
    closedir(dir);
    if (ok && unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        ok = petrel_error_set_errno(err, errno, "rmdir %s: %s", name, strerror(errno));
    return ok;
}

bool fs_remove_tree(const char *path, struct petrel_error *err)
{
    return remove_at(AT_FDCWD, path, err);
}

int fs_tmpfile_open(const char *dir, bool *linkable, struct petrel_error *err)
{
    *linkable = true;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
        petrel_error_set_errno(err, errno, "cannot create a file in %s: %s", dir, strerror(errno));
        return -1;
    }
    *linkable = false;
    char *path = xasprintf("%s/.petrel-spool.XXXXXX", dir);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        petrel_error_set_errno(err, errno, "cannot create a file in %s: %s", dir, strerror(errno));
    else
        unlink(path);
    free(path);
    return fd;
}
