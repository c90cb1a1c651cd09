/* pcrfs — every request that would write: refused with EROFS, but for the dynamic
 * level (-o level=K), which the mounting user sets by writing /.pcrfs/level (ops.c,
 * pcrfsdir.c) or user.pcrfs.level, and access(2), which only mounts without
 * default_permissions (the dynamic view's) send.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fs.h"

static struct pcrfs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* Every operation that would change the tree. With the default "-o ro" the kernel
 * refuses these itself and they never arrive; they are here for mounts made with
 * "-o rw", where without a handler some would fail with ENOSYS instead of EROFS. */
void pcrfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                      struct fuse_file_info *fi)
{
    struct pcrfs *fs = fs_of(req);
    struct stat st;

    (void)fi;
    /* Truncating /.pcrfs/level to 0 before a write (O_TRUNC on a kernel without
     * atomic_o_trunc) is a no-op; every other change is refused. */
    if (pcrfs_is_level_file(fs, ino) && to_set == FUSE_SET_ATTR_SIZE && attr->st_size == 0) {
        if (!pcrfs_may_control(fs, req)) {
            fuse_reply_err(req, EACCES);
        } else if (pcrfs_node_stat(fs, ino, &st) != 0) {
            fuse_reply_err(req, EIO);
        } else {
            fuse_reply_attr(req, &st, 0.0);
        }
        return;
    }
    fuse_reply_err(req, EROFS);
}

void pcrfs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    (void)parent, (void)name, (void)mode, (void)rdev;
    fuse_reply_err(req, EROFS);
}

void pcrfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    fuse_reply_err(req, EROFS);
}

void pcrfs_op_remove(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    (void)parent, (void)name;
    fuse_reply_err(req, EROFS);
}

void pcrfs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    (void)link, (void)parent, (void)name;
    fuse_reply_err(req, EROFS);
}

void pcrfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                     const char *newname, unsigned int flags)
{
    (void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
    fuse_reply_err(req, EROFS);
}

void pcrfs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    (void)ino, (void)newparent, (void)newname;
    fuse_reply_err(req, EROFS);
}

void pcrfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                     struct fuse_file_info *fi)
{
    (void)parent, (void)name, (void)mode, (void)fi;
    fuse_reply_err(req, EROFS);
}

/* user.pcrfs.level on dynamic/ and /.pcrfs/level: pcrfsdir.c. */
void pcrfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                       size_t size, int flags)
{
    (void)flags;
    fuse_reply_err(req, -pcrfs_level_setxattr(fs_of(req), req, ino, name, value, size));
}

static void reply_xattr(fuse_req_t req, int rc, const char *val, size_t len, size_t size)
{
    if (rc)
        fuse_reply_err(req, -rc);
    else if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, val, len);
}

/* A view's file attributes (refurb/'s: its descriptor's getxattr), or NULL. */
static const struct pcr_view *file_view(const struct pcrfs *fs, fuse_ino_t ino, uint64_t *id)
{
    struct ino_parts p = ino_split(ino);

    *id = p.id;
    return p.is_file ? view_of(fs, p) : NULL;
}

/* The level's attribute (dynamic mounts) and the views' (refurb/'s). A mount with
 * neither answers ENOSYS once, and the kernel stops asking; a mount with a view that
 * has attributes must answer every node, or that ENOSYS would hide its files' too. */
void pcrfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct pcrfs *fs = fs_of(req);
    char val[128];
    size_t len = 0;
    uint64_t id;
    const struct pcr_view *v = file_view(fs, ino, &id);
    int rc = pcr_view_getxattr(v, id, name, val, sizeof(val), &len);

    if (rc == -ENOSYS)
        rc = pcrfs_level_getxattr(fs, ino, name, val, sizeof(val), &len);
    if (rc == -ENOSYS && pcr_views_have_xattrs(fs->views))
        rc = strncmp(name, "user.", 5) == 0 ? -ENODATA : -EOPNOTSUPP;
    reply_xattr(req, rc, val, len, size);
}

void pcrfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct pcrfs *fs = fs_of(req);
    const char *list = "";
    size_t len = 0;
    uint64_t id;
    const struct pcr_view *v = file_view(fs, ino, &id);
    int rc = pcr_view_listxattr(v, id, &list, &len);

    if (rc == -ENOSYS)
        rc = pcrfs_level_listxattr(fs, ino, &list, &len);
    if (rc == -ENOSYS && pcr_views_have_xattrs(fs->views)) {
        list = "";
        len = 0;
        rc = 0;
    }
    reply_xattr(req, rc, list, len, size);
}

/* Sent only by mounts without default_permissions (the dynamic view's): the modes
 * say it all (everything readable, directories searchable), and the one writable
 * file is /.pcrfs/level, for its owner; writing anything else is EROFS, as on a
 * read-only mount. */
void pcrfs_op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct pcrfs *fs = fs_of(req);
    struct stat st;
    int rc = pcrfs_node_stat(fs, ino, &st);

    if (rc == 0 && (mask & W_OK))
        rc = !pcrfs_is_level_file(fs, ino) ? -EROFS : pcrfs_may_control(fs, req) ? 0 : -EACCES;
    if (rc == 0 && (mask & X_OK) && !(st.st_mode & S_IXUSR))
        rc = -EACCES;
    fuse_reply_err(req, -rc);
}

void pcrfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    (void)ino, (void)name;
    fuse_reply_err(req, EROFS);
}
