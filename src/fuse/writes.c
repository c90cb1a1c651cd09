/* pcrfs — every request that would write: refused with EROFS, but for the dynamic
 * level (-o level=K), which the mounting user sets by writing /.pcrfs/level (ops.c)
 * or user.pcrfs.level, and access(2), which only mounts without
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
    unsigned flags = 0;
    struct stat st;
    int rc = pcrfs_node_attr(fs, ino, &st, &flags);

    (void)fi;
    /* Truncating /.pcrfs/level to 0 before a write (O_TRUNC on a kernel without
     * atomic_o_trunc) is a no-op; every other change is refused. */
    if (rc == 0 && (flags & PCRFS_NODE_WRITABLE) && to_set == FUSE_SET_ATTR_SIZE &&
        attr->st_size == 0) {
        if (!pcrfs_may_control(fs, req)) {
            fuse_reply_err(req, EACCES);
        } else if (pcrfs_node_attr(fs, ino, &st, NULL) != 0) {
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

/* user.pcrfs.level on dynamic/ and /.pcrfs/level (the library's): only the mounting
 * user (or root) may set it. */
void pcrfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                       size_t size, int flags)
{
    struct pcrfs *fs = fs_of(req);
    uint64_t node = pcrfs_ino_node(&fs->snaps, ino);
    int rc = pcrfs_node_setxattr(fs->store, node, name, NULL, 0); /* may it be set here? */

    (void)flags;
    if (rc == 0 && !pcrfs_may_control(fs, req))
        rc = -EPERM;
    else if (rc == 0)
        rc = pcrfs_node_setxattr(fs->store, node, name, value, size);
    fuse_reply_err(req, -rc);
}

static void reply_xattr(fuse_req_t req, ssize_t n, const char *val, size_t size)
{
    if (n < 0)
        fuse_reply_err(req, (int)-n);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)n);
    else if (size < (size_t)n)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, val, (size_t)n);
}

/* The level's attribute (dynamic mounts) and the views' (refurb/'s). A mount with
 * neither answers ENOSYS once, and the kernel stops asking; a mount with a view that
 * has attributes must answer every node, or that ENOSYS would hide its files' too
 * (the library answers so). */
void pcrfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct pcrfs *fs = fs_of(req);
    char val[256];
    ssize_t n =
        pcrfs_node_getxattr(fs->store, pcrfs_ino_node(&fs->snaps, ino), name, val, sizeof(val));

    reply_xattr(req, n, val, size);
}

void pcrfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct pcrfs *fs = fs_of(req);
    char list[1024];
    ssize_t n =
        pcrfs_node_listxattr(fs->store, pcrfs_ino_node(&fs->snaps, ino), list, sizeof(list));

    reply_xattr(req, n, list, size);
}

/* Sent only by mounts without default_permissions (the dynamic view's): the modes
 * say it all (everything readable, directories searchable), and the one writable
 * file is /.pcrfs/level, for its owner; writing anything else is EROFS, as on a
 * read-only mount. */
void pcrfs_op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    struct pcrfs *fs = fs_of(req);
    unsigned flags = 0;
    struct stat st;
    int rc = pcrfs_node_attr(fs, ino, &st, &flags);

    if (rc == 0 && (mask & W_OK))
        rc = !(flags & PCRFS_NODE_WRITABLE) ? -EROFS : pcrfs_may_control(fs, req) ? 0 : -EACCES;
    if (rc == 0 && (mask & X_OK) && !(st.st_mode & S_IXUSR))
        rc = -EACCES;
    fuse_reply_err(req, -rc);
}

void pcrfs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    (void)ino, (void)name;
    fuse_reply_err(req, EROFS);
}
