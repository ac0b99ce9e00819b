/* Whether a file system journals its metadata, which decides how many
 * flushes a durable write needs: on a journaling file system one fsync
 * commits every metadata change made before it (a link into a directory
 * included); without a journal each file and directory needs its own. */
#ifndef PETREL_CORE_FS_JOURNAL_H
#define PETREL_CORE_FS_JOURNAL_H

#include <stdbool.h>

/* True when `path` is on XFS, or on ext3/ext4 whose journal is active (the
 * device has an entry in /proc/fs/jbd2). False for everything else and
 * whenever it cannot be told (no /proc or /sys): the safe answer. Costs a
 * few system calls: callers keep the answer. */
bool fs_metadata_journaled(const char *path);

#endif
