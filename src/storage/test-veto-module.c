/* The save-vetoing test module (test-veto-module.h). */
#include "storage/test-veto-module.h"

#include "core/log.h"

#include <string.h>

static bool veto_save(void *ctx, const struct mail_save_info *info, struct petrel_error *err)
{
    const char *user = ctx;
    if (strcmp(mail_user_name(mailbox_user(info->dst)), user) != 0)
        return true;
    log_info("storage", "test module refused a save",
             "user=%s folder=%s kind=%d count=%zu size=%llu", user, mailbox_name(info->dst),
             (int)info->kind, info->count, (unsigned long long)info->size);
    return petrel_error_set(err, PETREL_ERR_OVER_QUOTA,
                            "test module: saves of %s are refused (%zu message(s), %llu bytes)",
                            user, info->count, (unsigned long long)info->size);
}

const struct mail_storage_module test_veto_save_module = {
    .name = "test-veto-save",
    .save = veto_save,
};
