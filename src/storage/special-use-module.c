/* Special use as a storage module (mail-storage-module.h): the attribute a
 * folder is created with, and the overrides that follow a folder's rename
 * and go with its deletion, for every front end alike. */
#include "storage/special-use.h"

#include "core/log.h"
#include "storage/mail-storage-module.h"

#include <stdio.h>
#include <string.h>

#define COMPONENT "storage"

bool special_use_namespace(struct mail_user *user, const struct namespace_config *ns)
{
    return ns != NULL && ns == mail_user_namespace(user, "personal", NULL);
}

static bool refuse(struct mail_folder_create_params *params, struct petrel_error *err,
                   const char *message)
{
    params->special_use_failed = true;
    snprintf(params->special_use_error, sizeof(params->special_use_error), "%s", message);
    return petrel_error_set(err, PETREL_ERR_INVALID, "%s", message);
}

static bool su_folder_create(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                             const char *name, struct mail_folder_create_params *params,
                             struct petrel_error *err)
{
    if (params->special_use == NULL)
        return true;
    if (!special_use_attr_valid(params->special_use))
        return refuse(params, err, "not a supported special-use attribute");
    if (!special_use_namespace(user, ns) && !params->special_use_optional)
        return refuse(params, err, "special-use attributes exist in the personal namespace only");
    return true;
}

static bool su_folder_created(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                              const char *name, struct mail_folder_create_params *params,
                              struct petrel_error *err)
{
    if (params->special_use == NULL || !special_use_namespace(user, ns))
        return true; /* elsewhere only with special_use_optional: ignored */
    struct petrel_error serr;
    if (special_use_set(user, name, params->special_use, &serr))
        return true;
    log_warn(COMPONENT, "special-use not set", "user=%s folder=%s error=\"%s\"",
             mail_user_name(user), name, serr.message);
    params->special_use_failed = true;
    memcpy(params->special_use_error, serr.message, sizeof(params->special_use_error));
    if (params->special_use_optional)
        return true;
    /* RFC 6154 3: no mailbox without the special use asked for. */
    return petrel_error_set(err, serr.code, "the special use could not be set: %s", serr.message);
}

static void su_folder_deleted(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                              const char *name)
{
    /* The folder is gone either way; its attribute must not outlive it. */
    struct petrel_error err;
    if (special_use_namespace(user, ns) && !special_use_folder_deleted(user, name, &err))
        log_warn(COMPONENT, "special-use cleanup failed", "user=%s folder=%s error=\"%s\"",
                 mail_user_name(user), name, err.message);
}

static void su_folder_renamed(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                              const char *old_name, const char *new_name)
{
    struct petrel_error err;
    if (special_use_namespace(user, ns) &&
        !special_use_folder_renamed(user, old_name, new_name, ns->separator, &err))
        log_warn(COMPONENT, "special-use not moved with the folder",
                 "user=%s folder=%s error=\"%s\"", mail_user_name(user), old_name, err.message);
}

const struct mail_storage_module special_use_module = {
    .name = "special-use",
    .folder_create = su_folder_create,
    .folder_created = su_folder_created,
    .folder_deleted = su_folder_deleted,
    .folder_renamed = su_folder_renamed,
};
