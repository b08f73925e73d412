// See netns.h.
#define _GNU_SOURCE
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

int netns_enter(napi_env env, napi_value path, netns_guard *g, const char **what) {
  g->orig = g->target = -1;
  napi_valuetype t;
  if (path == NULL || napi_typeof(env, path, &t) != napi_ok || t != napi_string) return 0;
  char buf[4096];
  size_t len;
  if (napi_get_value_string_utf8(env, path, buf, sizeof buf, &len) != napi_ok) {
    *what = "netns path";
    return EINVAL;
  }
  g->target = open(buf, O_RDONLY | O_CLOEXEC);
  if (g->target < 0) {
    *what = "open netns";
    return errno;
  }
  g->orig = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int e = errno;
  if (g->orig >= 0 && setns(g->target, CLONE_NEWNET) == 0) return 0;
  if (g->orig < 0) *what = "open own netns";
  else {
    e = errno;
    *what = "setns";
    close(g->orig);
  }
  close(g->target);
  g->orig = g->target = -1;
  return e;
}

void netns_leave(netns_guard *g) {
  if (g->orig < 0) return;
  if (setns(g->orig, CLONE_NEWNET) < 0) abort();
  close(g->orig);
  close(g->target);
  g->orig = g->target = -1;
}
