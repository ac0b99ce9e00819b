/* Unit tests for core/fs-journal.h: journal detection must never say yes
 * where it cannot be sure, since a wrong yes drops fsyncs a power loss
 * needs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/fs-journal.h"

#include <dirent.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

static void test_not_ext4_or_xfs_is_not_journaled(void **state)
{
    (void)state;
    assert_false(fs_metadata_journaled("/proc"));
    assert_false(fs_metadata_journaled("/sys"));
}

static void test_missing_path_is_not_journaled(void **state)
{
    (void)state;
    assert_false(fs_metadata_journaled("/nonexistent/petrel/journal-test"));
}

/* On ext4 the answer follows jbd2: with no journal running anywhere (this
 * project's VMs: ext4 made without one) nothing on ext4 is journaled. */
static void test_ext4_without_any_running_journal_is_not_journaled(void **state)
{
    (void)state;
    char dir[] = "/tmp/petrel-journal-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct statfs sf;
    assert_int_equal(statfs(dir, &sf), 0);
    size_t journals = 0;
    DIR *d = opendir("/proc/fs/jbd2");
    if (d != NULL) {
        const struct dirent *e;
        while ((e = readdir(d)) != NULL)
            journals += e->d_name[0] != '.';
        closedir(d);
    }
    if (sf.f_type == EXT4_SUPER_MAGIC && journals == 0)
        assert_false(fs_metadata_journaled(dir));
    if (sf.f_type == XFS_SUPER_MAGIC)
        assert_true(fs_metadata_journaled(dir));
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_ext4_or_xfs_is_not_journaled),
        cmocka_unit_test(test_missing_path_is_not_journaled),
        cmocka_unit_test(test_ext4_without_any_running_journal_is_not_journaled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
