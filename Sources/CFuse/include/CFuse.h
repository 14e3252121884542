#ifndef BUCKETFS_CFUSE_H
#define BUCKETFS_CFUSE_H

// A plain number: the FUSE_MAKE_VERSION(3, 14) form is invisible to Swift.
#define FUSE_USE_VERSION 314

#include <fuse3/fuse_lowlevel.h>
#include <sys/xattr.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <malloc.h>

static const int cfuse_xattr_create = XATTR_CREATE;
static const int cfuse_xattr_replace = XATTR_REPLACE;

// fuse_session_new becomes a macro over an inline function from libfuse 3.17;
// calling it through a real function keeps the Swift side portable.
struct fuse_session *cfuse_session_new(struct fuse_args *args,
                                       const struct fuse_lowlevel_ops *ops,
                                       void *userdata);

// libfuse <= 3.16 never tells the kernel FUSE_PARALLEL_DIROPS, so the kernel
// serialises lookup and readdir per directory. After fuse_session_mount, this
// installs pass-through I/O that adds the flag to the INIT reply.
int cfuse_enable_parallel_dirops(struct fuse_session *se);

// Asks the kernel to prune `count` nodes (FUSE_NOTIFY_PRUNE: their unused
// dentries go, then the inodes are forgotten). 0, or a negative errno
// (-EINVAL from a kernel that has no such notification).
int cfuse_notify_prune(struct fuse_session *se, const uint64_t *nodes, uint32_t count);

// libfuse logs through a variadic function; this forwards each formatted line.
typedef void (*cfuse_log_sink)(int level, const char *line);
void cfuse_set_log_sink(cfuse_log_sink sink);

// mallopt's parameter names are macros Swift does not import: a daemon
// serving large short-lived buffers wants them as mappings, not heap.
static inline int cfuse_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }

// glibc's name of an errno value ("ENOENT"), for metric labels; NULL for a
// value it has none for. strerrorname_np is a GNU extension Swift does not see.
const char *cfuse_errno_name(int code);

#endif
