/* The driver table (mail-storage-private.h): the listed driver fills every
 * entry (the storage API calls each without a NULL check), and the
 * configuration's scheme lookup finds exactly the listed drivers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/mail-storage-private.h"

#define FILLED(entry) assert_true(v->entry != NULL)

static void listed_driver_fills_every_entry(void **state)
{
    (void)state;
    const struct mail_storage_vfuncs *v = mail_storage_driver_find("maildir:%h/Maildir");
    assert_string_equal(v->scheme, "maildir");
    FILLED(storage_init);
    FILLED(storage_deinit);
    FILLED(folder_create);
    FILLED(folder_delete);
    FILLED(folder_rename);
    FILLED(mailbox_open);
    FILLED(append);
    FILLED(append_file);
    FILLED(copy);
    FILLED(move);
    FILLED(expunge);
    FILLED(update_flags);
    FILLED(set_flags);
    FILLED(message_open);
    FILLED(message_open_file);
    FILLED(message_sizes);
    FILLED(keyword_name);
    FILLED(cache_lookup);
    FILLED(cache_store);
    FILLED(cache_flush);
    FILLED(view_new);
    FILLED(view_free);
    FILLED(view_sync);
    FILLED(view_note_flags);
    FILLED(folder_list);
    FILLED(folder_exists);
    FILLED(folder_usage);
    FILLED(spool_open);
    FILLED(mailbox_close);
    FILLED(is_read_only);
    FILLED(memory_bytes);
    FILLED(mailbox_is);
    FILLED(mailbox_sync);
    FILLED(handle_uid_validity);
    FILLED(get_info);
    FILLED(foreach);
    FILLED(recent_claim);
    FILLED(recent_peek);
    FILLED(index_rebuild);
    FILLED(index_optimize);
    FILLED(cache_purge);
    FILLED(usage_recalc);
    FILLED(watch_hub_new);
    FILLED(watch_hub_free);
    FILLED(watch_new);
    FILLED(watch_take_changed);
    FILLED(watch_is_native);
    FILLED(watch_lost);
    FILLED(watch_free);
}

static void only_listed_schemes_are_found(void **state)
{
    (void)state;
    assert_null(mail_storage_driver_find("mbox:%h/mail"));
    assert_null(mail_storage_driver_find("maildirx:%h/Maildir"));
    assert_null(mail_storage_driver_find("maildir"));
    assert_null(mail_storage_driver_find(""));
    assert_non_null(mail_storage_driver_find("maildir:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(listed_driver_fills_every_entry),
        cmocka_unit_test(only_listed_schemes_are_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
