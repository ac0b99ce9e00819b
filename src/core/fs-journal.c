/* Metadata-journal detection (see fs-journal.h). ext2, ext3 and ext4 share
 * one magic number, and ext4 runs without a journal too (mkfs -O
 * ^has_journal, common on VM images): jbd2 lists each journal it runs as
 * /proc/fs/jbd2/<device>-<journal inode>, the device named as in
 * /sys/dev/block/<major>:<minor>. */
#include "core/fs-journal.h"

#include <dirent.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static bool jbd2_runs_for(dev_t dev)
{
    char sys[64];
    snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u", major(dev), minor(dev));
    char target[PATH_MAX];
    ssize_t n = readlink(sys, target, sizeof(target) - 1);
    if (n <= 0)
        return false;
    target[n] = '\0';
    const char *name = strrchr(target, '/');
    name = name != NULL ? name + 1 : target;
    size_t name_len = strlen(name);
    if (name_len == 0)
        return false;
    DIR *d = opendir("/proc/fs/jbd2");
    if (d == NULL)
        return false;
    bool found = false;
    const struct dirent *e;
    while (!found && (e = readdir(d)) != NULL)
        found = strncmp(e->d_name, name, name_len) == 0 && e->d_name[name_len] == '-';
    closedir(d);
    return found;
}

bool fs_metadata_journaled(const char *path)
{
    struct statfs sf;
    if (statfs(path, &sf) != 0)
        return false;
    if (sf.f_type == XFS_SUPER_MAGIC)
        return true;
    if (sf.f_type != EXT4_SUPER_MAGIC)
        return false;
    struct stat st;
    return stat(path, &st) == 0 && jbd2_runs_for(st.st_dev);
}
