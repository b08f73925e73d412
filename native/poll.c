// Readiness notification for file descriptors (netlink sockets, pcap), driven
// by the Node event loop through uv_poll. The callback only says "readable"
// (or an error status); the reading itself is a separate, non-blocking call.
#include <stdlib.h>
#include <uv.h>

#include "addon.h"

typedef struct {
  uv_poll_t handle;
  napi_env env;
  napi_ref cb;
  napi_async_context ctx;
  int closing;    // pollStop or finalizer started closing the uv handle
  int uv_closed;  // libuv finished closing it
  int finalized;  // the JS External was garbage-collected
} poller_t;

// p is freed once both libuv and the JS side are done with it.
static void on_closed(uv_handle_t *h) {
  poller_t *p = h->data;
  p->uv_closed = 1;
  if (p->finalized) free(p);
}

static void begin_close(napi_env env, poller_t *p) {
  p->closing = 1;
  uv_poll_stop(&p->handle);
  napi_delete_reference(env, p->cb);
  napi_async_destroy(env, p->ctx);
  uv_close((uv_handle_t *)&p->handle, on_closed);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  poller_t *p = h->data;
  if (p->closing) return;
  napi_handle_scope scope;
  if (napi_open_handle_scope(p->env, &scope) != napi_ok) return;
  napi_value cb, recv, args[2], result;
  napi_get_reference_value(p->env, p->cb, &cb);
  napi_get_global(p->env, &recv);  // make_callback needs an object receiver
  napi_create_int32(p->env, status, &args[0]);
  napi_create_int32(p->env, events, &args[1]);
  // make_callback runs microtasks; an exception the callback threw is left
  // pending, so hand it to process 'uncaughtException' like any JS callback's.
  if (napi_make_callback(p->env, p->ctx, recv, cb, 2, args, &result) == napi_pending_exception) {
    napi_value err;
    if (napi_get_and_clear_last_exception(p->env, &err) == napi_ok) napi_fatal_exception(p->env, err);
  }
  napi_close_handle_scope(p->env, scope);
}

static void poller_finalize(napi_env env, void *data, void *hint) {
  (void)hint;
  poller_t *p = data;
  p->finalized = 1;
  if (!p->closing) begin_close(env, p);
  else if (p->uv_closed) free(p);
}

// pollStart(fd, callback(status, events)): External handle
static napi_value poll_start(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd;
  napi_valuetype t;
  if (argc < 2 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      napi_typeof(env, argv[1], &t) != napi_ok || t != napi_function)
    return throw_type(env, "pollStart(fd, callback)");
  uv_loop_t *loop;
  NAPI_CALL(env, napi_get_uv_event_loop(env, &loop));
  poller_t *p = calloc(1, sizeof *p);
  if (!p) return throw_errno(env, 12, "calloc");
  p->env = env;
  int r = uv_poll_init(loop, &p->handle, fd);
  if (r < 0) {
    free(p);
    return throw_errno(env, -r, "uv_poll_init");
  }
  p->handle.data = p;
  napi_value name;
  napi_create_string_utf8(env, "clbprobe.poll", NAPI_AUTO_LENGTH, &name);
  napi_create_reference(env, argv[1], 1, &p->cb);
  napi_async_init(env, NULL, name, &p->ctx);
  r = uv_poll_start(&p->handle, UV_READABLE, on_poll);
  if (r < 0) {
    p->finalized = 1;  // no External will ever own it
    begin_close(env, p);
    return throw_errno(env, -r, "uv_poll_start");
  }
  napi_value ext;
  NAPI_CALL(env, napi_create_external(env, p, poller_finalize, NULL, &ext));
  return ext;
}

// pollStop(handle): stops watching; must be called before the fd is closed.
static napi_value poll_stop(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  poller_t *p;
  if (argc < 1 || napi_get_value_external(env, argv[0], (void **)&p) != napi_ok)
    return throw_type(env, "pollStop(handle)");
  if (!p->closing) begin_close(env, p);
  return NULL;
}

// pollSet(handle, events): 0 pauses the watcher, UV_READABLE (1) resumes it.
// Level-triggered: a paused watcher keeps unread data for later.
static napi_value poll_set(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  poller_t *p;
  int32_t events;
  if (argc < 2 || napi_get_value_external(env, argv[0], (void **)&p) != napi_ok ||
      napi_get_value_int32(env, argv[1], &events) != napi_ok)
    return throw_type(env, "pollSet(handle, events)");
  if (p->closing) return NULL;
  int r = events ? uv_poll_start(&p->handle, events, on_poll) : uv_poll_stop(&p->handle);
  if (r < 0) return throw_errno(env, -r, "uv_poll_start");
  return NULL;
}

napi_status register_poll(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"pollStart", NULL, poll_start, NULL, NULL, NULL, napi_default, NULL},
      {"pollSet", NULL, poll_set, NULL, NULL, NULL, napi_default, NULL},
      {"pollStop", NULL, poll_stop, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
