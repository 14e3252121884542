#include "CFuse.h"

#include <linux/fuse.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

struct fuse_session *cfuse_session_new(struct fuse_args *args,
                                       const struct fuse_lowlevel_ops *ops,
                                       void *userdata) {
  return fuse_session_new(args, ops, sizeof(*ops), userdata);
}

// The unique id of the kernel's INIT request; one mount per process.
static _Atomic uint64_t init_unique = 0;

static ssize_t passthrough_read(int fd, void *buf, size_t len, void *userdata) {
  (void)userdata;
  ssize_t n = read(fd, buf, len);
  if (n >= (ssize_t)sizeof(struct fuse_in_header)) {
    const struct fuse_in_header *in = buf;
    if (in->opcode == FUSE_INIT) atomic_store(&init_unique, in->unique);
  }
  return n;
}

static ssize_t passthrough_writev(int fd, struct iovec *iov, int count, void *userdata) {
  (void)userdata;
  uint64_t pending = atomic_load(&init_unique);
  if (pending != 0 && count >= 2 && iov[0].iov_len >= sizeof(struct fuse_out_header) &&
      iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)) {
    const struct fuse_out_header *out = iov[0].iov_base;
    if (out->unique == pending && out->error == 0) {
      struct fuse_init_out *init = iov[1].iov_base;
      init->flags |= FUSE_PARALLEL_DIROPS;
      atomic_store(&init_unique, 0);
    }
  }
  return writev(fd, iov, count);
}

int cfuse_enable_parallel_dirops(struct fuse_session *se) {
  static const struct fuse_custom_io io = {
      .writev = passthrough_writev,
      .read = passthrough_read,
  };
  return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

static cfuse_log_sink current_sink = NULL;

static void forward_log(enum fuse_log_level level, const char *fmt, va_list ap) {
  char line[1024];
  vsnprintf(line, sizeof(line), fmt, ap);
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
  if (current_sink != NULL) current_sink((int)level, line);
}

void cfuse_set_log_sink(cfuse_log_sink sink) {
  current_sink = sink;
  fuse_set_log_func(forward_log);
}

// FUSE_NOTIFY_PRUNE (protocol 7.45, Linux 6.18; newer than this system's
// <linux/fuse.h> and libfuse): the kernel drops the unused dentries of each
// node and, once nothing holds the inode, forgets it. One write for up to
// `count` nodes instead of one inval_entry each.
enum { cfuse_notify_prune_code = 9 };

struct cfuse_notify_prune_out {
  uint32_t count;
  uint32_t padding;
  uint64_t spare;
};

int cfuse_notify_prune(struct fuse_session *se, const uint64_t *nodes, uint32_t count) {
  struct cfuse_notify_prune_out arg = {.count = count};
  struct fuse_out_header out = {
      .len = (uint32_t)(sizeof(out) + sizeof(arg) + count * sizeof(uint64_t)),
      .error = cfuse_notify_prune_code,
      .unique = 0,
  };
  struct iovec iov[3] = {
      {.iov_base = &out, .iov_len = sizeof(out)},
      {.iov_base = &arg, .iov_len = sizeof(arg)},
      {.iov_base = (void *)nodes, .iov_len = count * sizeof(uint64_t)},
  };
  ssize_t n = writev(fuse_session_fd(se), iov, 3);
  return n < 0 ? -errno : 0;
}
