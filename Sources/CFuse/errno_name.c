// strerrorname_np is a GNU extension: its declaration needs _GNU_SOURCE
// before the first system header, which this file alone defines.
#define _GNU_SOURCE
#include <string.h>

#include "CFuse.h"

const char *cfuse_errno_name(int code) { return strerrorname_np(code); }
