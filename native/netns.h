// Running one operation of the calling thread inside another network
// namespace (attaching to, or capturing on, an interface that lives there).
#ifndef CLBPROBE_NETNS_H
#define CLBPROBE_NETNS_H
#include <node_api.h>

typedef struct {
  int orig;    // our own netns, or -1 when nothing was entered
  int target;  // the entered netns, or -1
} netns_guard;

// Enters the netns at the path held by the JS value (a string; undefined or
// null means "stay here"). Returns 0 or an errno value; on error nothing is
// entered and *what names the failed step.
int netns_enter(napi_env env, napi_value path, netns_guard *g, const char **what);
// Goes back to our own netns. Aborts if that fails: the thread must never stay
// in a foreign namespace unnoticed.
void netns_leave(netns_guard *g);
#endif
