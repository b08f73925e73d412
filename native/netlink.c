// Minimal netlink socket primitives for clbprobe. Only syscalls live here:
// framing, attributes and protocol logic are TypeScript (src/kernel/netlink/).
//
// Receive model: JS registers a uv_poll watcher on the socket fd; when it is
// readable, JS calls nlRecv() which drains up to one caller-provided buffer of
// datagrams without blocking. An ENOBUFS (receive queue overflow) is reported
// in the status array, never thrown, so that callers can resync.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/netlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addon.h"
#include "netns.h"

// Largest single datagram we accept. Dump datagrams are ~32 KiB; notifications
// are small. A datagram larger than this is reported as truncated (EMSGSIZE).
#define NL_MAX_DATAGRAM (256 * 1024)

// nlOpen(protocol: number, netnsPath?: string): number (fd)
// With netnsPath, the socket is created inside that network namespace: the
// calling thread enters it for the socket() call and returns immediately.
static napi_value nl_open(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t proto;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &proto) != napi_ok)
    return throw_type(env, "nlOpen(protocol[, netnsPath])");

  netns_guard g;
  const char *what = "netns";
  int err = netns_enter(env, argc >= 2 ? argv[1] : NULL, &g, &what);
  if (err) return throw_errno(env, err, what);
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, proto);
  int e = errno;
  netns_leave(&g);
  if (fd < 0) return throw_errno(env, e, "socket(AF_NETLINK)");
  return make_int(env, fd);
}

// nlBind(fd, groups): number (the port id the kernel assigned)
static napi_value nl_bind(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd;
  uint32_t groups;
  if (argc < 2 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      napi_get_value_uint32(env, argv[1], &groups) != napi_ok)
    return throw_type(env, "nlBind(fd, groups)");
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = groups};
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) return throw_errno(env, errno, "bind");
  socklen_t sl = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) return throw_errno(env, errno, "getsockname");
  // Port ids are u32; kernel-chosen ones are often above 2^31.
  napi_value port;
  NAPI_CALL(env, napi_create_uint32(env, sa.nl_pid, &port));
  return port;
}

// nlSetsockopt(fd, level, optname, value: int)
static napi_value nl_setsockopt(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd, level, opt, val;
  if (argc < 4 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      napi_get_value_int32(env, argv[1], &level) != napi_ok ||
      napi_get_value_int32(env, argv[2], &opt) != napi_ok ||
      napi_get_value_int32(env, argv[3], &val) != napi_ok)
    return throw_type(env, "nlSetsockopt(fd, level, optname, value)");
  if (setsockopt(fd, level, opt, &val, sizeof val) < 0) return throw_errno(env, errno, "setsockopt");
  return NULL;
}

// nlGetsockopt(fd, level, optname): number
static napi_value nl_getsockopt(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd, level, opt, val = 0;
  if (argc < 3 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      napi_get_value_int32(env, argv[1], &level) != napi_ok ||
      napi_get_value_int32(env, argv[2], &opt) != napi_ok)
    return throw_type(env, "nlGetsockopt(fd, level, optname)");
  socklen_t l = sizeof val;
  if (getsockopt(fd, level, opt, &val, &l) < 0) return throw_errno(env, errno, "getsockopt");
  return make_int(env, val);
}

// nlSend(fd, buf: Uint8Array): number (bytes sent). Always to the kernel (pid 0).
static napi_value nl_send(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd;
  void *data;
  size_t len;
  if (argc < 2 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      get_bytes(env, argv[1], &data, &len) != napi_ok)
    return throw_type(env, "nlSend(fd, Uint8Array)");
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
  ssize_t n;
  do {
    n = sendto(fd, data, len, 0, (struct sockaddr *)&sa, sizeof sa);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return throw_errno(env, errno, "sendto");
  return make_int(env, (int32_t)n);
}

// nlRecv(fd, buf: Uint8Array, status: Int32Array, maxDatagram?: number): number (datagrams read)
// Reads datagrams back to back into buf while at least maxDatagram bytes (default
// NL_MAX_DATAGRAM) remain (or once, if buf is smaller), stopping at EAGAIN. A socket that only
// gets notifications (one small message each) passes a small bound and a small buffer.
// status[0] = count, status[1] = errno that stopped the batch (EAGAIN: the queue is empty;
// 0: the buffer or the status array was full),
// status[2 + i] = length of datagram i. Datagram i starts where i-1 ended.
static napi_value nl_recv(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd, max_datagram = NL_MAX_DATAGRAM;
  void *buf, *st;
  size_t cap, stlen;
  if (argc < 3 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      get_bytes(env, argv[1], &buf, &cap) != napi_ok || get_bytes(env, argv[2], &st, &stlen) != napi_ok ||
      stlen < 3 * sizeof(int32_t) ||
      (argc >= 4 && (napi_get_value_int32(env, argv[3], &max_datagram) != napi_ok || max_datagram < 1)))
    return throw_type(env, "nlRecv(fd, Uint8Array, Int32Array(>=3), maxDatagram?: positive int)");
  int32_t *status = st;
  size_t max_count = stlen / sizeof(int32_t) - 2;
  size_t off = 0, count = 0;
  int err = 0;
  while (count < max_count) {
    size_t room = cap - off;
    if (count > 0 && room < (size_t)max_datagram) break;
    // MSG_TRUNC makes recv return the datagram's real length, so a datagram
    // larger than the room left is detected instead of silently cut.
    ssize_t n = recv(fd, (char *)buf + off, room, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      // EAGAIN is reported too: it says the queue is empty, so the caller need not call again.
      err = errno == EWOULDBLOCK ? EAGAIN : errno;
      break;
    }
    if ((size_t)n > room) {
      err = EMSGSIZE;
      break;
    }
    status[2 + count] = (int32_t)n;
    off += (size_t)n;
    count++;
  }
  status[0] = (int32_t)count;
  status[1] = err;
  return make_int(env, (int32_t)count);
}

// nlClose(fd)
static napi_value nl_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int32_t fd;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok) return throw_type(env, "nlClose(fd)");
  if (close(fd) < 0) return throw_errno(env, errno, "close");
  return NULL;
}

napi_status register_netlink(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"nlOpen", NULL, nl_open, NULL, NULL, NULL, napi_default, NULL},
      {"nlBind", NULL, nl_bind, NULL, NULL, NULL, napi_default, NULL},
      {"nlSetsockopt", NULL, nl_setsockopt, NULL, NULL, NULL, napi_default, NULL},
      {"nlGetsockopt", NULL, nl_getsockopt, NULL, NULL, NULL, napi_default, NULL},
      {"nlSend", NULL, nl_send, NULL, NULL, NULL, napi_default, NULL},
      {"nlRecv", NULL, nl_recv, NULL, NULL, NULL, napi_default, NULL},
      {"nlClose", NULL, nl_close, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
