// libpcap primitives for clbprobe: open a live capture (optionally inside a
// network namespace), set a kernel filter, read packets in batches without
// blocking, report pcap_stats, and write packets to a standard .pcap file.
// Parsing, classification and the size/time bounds of evidence files are
// TypeScript (src/capture/).
//
// Read model: JS watches pcapFd() with pollStart(); when readable it calls
// pcapRead(), which copies up to one caller buffer of packets and returns.
#include <errno.h>
#include <pcap/pcap.h>
#include <stdlib.h>
#include <string.h>

#include "addon.h"
#include "netns.h"

typedef struct {
  pcap_t *p;
  int snaplen;
} cap_t;

typedef struct {
  pcap_dumper_t *d;
} dump_t;

static void cap_finalize(napi_env env, void *data, void *hint) {
  cap_t *c = data;
  if (c->p) pcap_close(c->p);
  free(c);
}

static void dump_finalize(napi_env env, void *data, void *hint) {
  dump_t *d = data;
  if (d->d) pcap_dump_close(d->d);
  free(d);
}

static cap_t *get_cap(napi_env env, napi_value v) {
  cap_t *c = NULL;
  if (!v || napi_get_value_external(env, v, (void **)&c) != napi_ok || !c->p) return NULL;
  return c;
}

// pcap reports errors as PCAP_ERROR_* plus text; give JS an errno-style code
// so that permission problems can be named (CAP_NET_RAW).
static napi_value throw_pcap(napi_env env, int status, const char *text) {
  int err = EINVAL;
  if (status == PCAP_ERROR_PERM_DENIED) err = EPERM;
  else if (status == PCAP_ERROR_NO_SUCH_DEVICE) err = ENODEV;
  else if (status == PCAP_ERROR_IFACE_NOT_UP) err = ENETDOWN;
  char msg[PCAP_ERRBUF_SIZE + 64];
  snprintf(msg, sizeof msg, "pcap: %s", text);
  napi_value m, code, e, n;
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &m);
  napi_create_string_utf8(env,
                          err == EPERM ? "EPERM" : err == ENODEV ? "ENODEV"
                                               : err == ENETDOWN ? "ENETDOWN" : "EPCAP",
                          NAPI_AUTO_LENGTH, &code);
  napi_create_error(env, code, m, &e);
  napi_create_int32(env, err, &n);
  napi_set_named_property(env, e, "errno", n);
  napi_throw(env, e);
  return NULL;
}

static int get_int_prop(napi_env env, napi_value obj, const char *name, int32_t dflt) {
  napi_value v;
  bool has = false;
  int32_t out = dflt;
  if (napi_has_named_property(env, obj, name, &has) == napi_ok && has &&
      napi_get_named_property(env, obj, name, &v) == napi_ok)
    napi_get_value_int32(env, v, &out);
  return out;
}

// pcapOpen(ifname, {snaplen, bufferSize, timeoutMs, immediate, direction,
// netnsPath}): External. direction: 0 both, 1 inbound only, 2 outbound only.
// The capture socket is created in netnsPath when given and stays bound there.
static napi_value cap_open(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char ifname[64];
  size_t len;
  napi_valuetype t;
  if (argc < 2 || napi_get_value_string_utf8(env, argv[0], ifname, sizeof ifname, &len) != napi_ok ||
      napi_typeof(env, argv[1], &t) != napi_ok || t != napi_object)
    return throw_type(env, "pcapOpen(ifname, options)");
  int snaplen = get_int_prop(env, argv[1], "snaplen", 262144);
  int bufsize = get_int_prop(env, argv[1], "bufferSize", 2 << 20);
  int timeout = get_int_prop(env, argv[1], "timeoutMs", 100);
  int immediate = get_int_prop(env, argv[1], "immediate", 0);
  int direction = get_int_prop(env, argv[1], "direction", 0);
  napi_value ns_v = NULL;
  bool has_ns = false;
  if (napi_has_named_property(env, argv[1], "netnsPath", &has_ns) == napi_ok && has_ns)
    napi_get_named_property(env, argv[1], "netnsPath", &ns_v);

  char errbuf[PCAP_ERRBUF_SIZE] = "";
  pcap_t *p = pcap_create(ifname, errbuf);
  if (!p) return throw_pcap(env, PCAP_ERROR, errbuf);
  pcap_set_snaplen(p, snaplen);
  pcap_set_buffer_size(p, bufsize);
  pcap_set_timeout(p, timeout);
  pcap_set_immediate_mode(p, immediate);
  pcap_set_promisc(p, 0);

  netns_guard g;
  const char *what = "";
  int e = netns_enter(env, ns_v, &g, &what);
  if (e) {
    pcap_close(p);
    return throw_errno(env, e, what);
  }
  int st = pcap_activate(p);
  netns_leave(&g);
  if (st < 0) {
    char msg[PCAP_ERRBUF_SIZE + 80];
    snprintf(msg, sizeof msg, "%s: %s", ifname, pcap_geterr(p)[0] ? pcap_geterr(p) : pcap_statustostr(st));
    pcap_close(p);
    return throw_pcap(env, st, msg);
  }
  pcap_direction_t dir = direction == 1 ? PCAP_D_IN : direction == 2 ? PCAP_D_OUT : PCAP_D_INOUT;
  if ((direction && pcap_setdirection(p, dir) < 0) || pcap_setnonblock(p, 1, errbuf) < 0) {
    char msg[PCAP_ERRBUF_SIZE];
    snprintf(msg, sizeof msg, "%s", pcap_geterr(p));
    pcap_close(p);
    return throw_pcap(env, PCAP_ERROR, msg);
  }
  cap_t *c = calloc(1, sizeof *c);
  if (!c) {
    pcap_close(p);
    return throw_errno(env, ENOMEM, "calloc");
  }
  c->p = p;
  c->snaplen = pcap_snapshot(p);
  napi_value ext;
  NAPI_CALL(env, napi_create_external(env, c, cap_finalize, NULL, &ext));
  return ext;
}

// pcapDatalink(cap): the DLT_* link type of the captured packets.
static napi_value cap_datalink(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cap_t *c = argc >= 1 ? get_cap(env, argv[0]) : NULL;
  if (!c) return throw_type(env, "pcapDatalink(cap)");
  return make_int(env, pcap_datalink(c->p));
}

// pcapSetFilter(cap, expression): compiles and installs a kernel filter.
static napi_value cap_set_filter(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cap_t *c = argc >= 2 ? get_cap(env, argv[0]) : NULL;
  size_t len;
  if (!c || napi_get_value_string_utf8(env, argv[1], NULL, 0, &len) != napi_ok)
    return throw_type(env, "pcapSetFilter(cap, expression)");
  char *expr = malloc(len + 1);
  if (!expr) return throw_errno(env, ENOMEM, "malloc");
  napi_get_value_string_utf8(env, argv[1], expr, len + 1, &len);
  struct bpf_program prog;
  int r = pcap_compile(c->p, &prog, expr, 1, PCAP_NETMASK_UNKNOWN);
  free(expr);
  if (r < 0) return throw_pcap(env, PCAP_ERROR, pcap_geterr(c->p));
  r = pcap_setfilter(c->p, &prog);
  pcap_freecode(&prog);
  if (r < 0) return throw_pcap(env, PCAP_ERROR, pcap_geterr(c->p));
  return NULL;
}

// pcapFd(cap): the descriptor to watch for readability.
static napi_value cap_fd(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cap_t *c = argc >= 1 ? get_cap(env, argv[0]) : NULL;
  if (!c) return throw_type(env, "pcapFd(cap)");
  return make_int(env, pcap_get_selectable_fd(c->p));
}

typedef struct {
  uint8_t *buf;
  size_t size, used;
  uint32_t *meta;
  uint32_t count, max;
} batch_t;

// Per packet, 5 uint32: ts seconds, ts microseconds, captured length, wire
// length, offset of the captured bytes in the data buffer.
#define META_WORDS 5

static void on_packet(u_char *user, const struct pcap_pkthdr *h, const u_char *bytes) {
  batch_t *b = (batch_t *)user;
  uint32_t *m = b->meta + b->count * META_WORDS;
  m[0] = (uint32_t)h->ts.tv_sec;
  m[1] = (uint32_t)h->ts.tv_usec;
  m[2] = h->caplen;
  m[3] = h->len;
  m[4] = (uint32_t)b->used;
  memcpy(b->buf + b->used, bytes, h->caplen);
  b->used += h->caplen;
  b->count++;
}

// pcapRead(cap, data, meta): number of packets copied (0 = none pending).
// Stops when meta is full or data has less room than one snaplen.
static napi_value cap_read(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cap_t *c = argc >= 3 ? get_cap(env, argv[0]) : NULL;
  batch_t b = {0};
  size_t meta_len;
  if (!c || get_bytes(env, argv[1], (void **)&b.buf, &b.size) != napi_ok ||
      get_bytes(env, argv[2], (void **)&b.meta, &meta_len) != napi_ok)
    return throw_type(env, "pcapRead(cap, data, meta)");
  b.max = meta_len / (META_WORDS * 4);
  for (;;) {
    size_t room = (b.size - b.used) / (size_t)c->snaplen;
    uint32_t want = b.max - b.count;
    if (room < want) want = room;
    if (want == 0) break;
    int n = pcap_dispatch(c->p, (int)want, on_packet, (u_char *)&b);
    if (n < 0) return throw_pcap(env, n, pcap_geterr(c->p));
    if (n == 0) break;
  }
  return make_int(env, (int32_t)b.count);
}

// pcapStats(cap): [received, dropped (buffer full), dropped by the interface]
static napi_value cap_stats(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cap_t *c = argc >= 1 ? get_cap(env, argv[0]) : NULL;
  if (!c) return throw_type(env, "pcapStats(cap)");
  struct pcap_stat s;
  if (pcap_stats(c->p, &s) < 0) return throw_pcap(env, PCAP_ERROR, pcap_geterr(c->p));
  napi_value arr, v;
  napi_create_array_with_length(env, 3, &arr);
  unsigned vals[3] = {s.ps_recv, s.ps_drop, s.ps_ifdrop};
  for (uint32_t i = 0; i < 3; i++) {
    napi_create_uint32(env, vals[i], &v);
    napi_set_element(env, arr, i, v);
  }
  return arr;
}

// pcapClose(cap)
static napi_value cap_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cap_t *c = argc >= 1 ? get_cap(env, argv[0]) : NULL;
  if (!c) return throw_type(env, "pcapClose(cap)");
  pcap_close(c->p);
  c->p = NULL;
  return NULL;
}

// pcapDumpOpen(cap, path): External; the file gets the capture's link type
// and snaplen in its header.
static napi_value dump_open(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cap_t *c = argc >= 2 ? get_cap(env, argv[0]) : NULL;
  char path[4096];
  size_t len;
  if (!c || napi_get_value_string_utf8(env, argv[1], path, sizeof path, &len) != napi_ok)
    return throw_type(env, "pcapDumpOpen(cap, path)");
  pcap_dumper_t *d = pcap_dump_open(c->p, path);
  if (!d) return throw_pcap(env, PCAP_ERROR, pcap_geterr(c->p));
  dump_t *h = calloc(1, sizeof *h);
  if (!h) {
    pcap_dump_close(d);
    return throw_errno(env, ENOMEM, "calloc");
  }
  h->d = d;
  napi_value ext;
  NAPI_CALL(env, napi_create_external(env, h, dump_finalize, NULL, &ext));
  return ext;
}

// pcapDumpWrite(dump, data, meta, first, count): writes packets first..first+count-1
// of a pcapRead batch.
static napi_value dump_write(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  dump_t *d = NULL;
  uint8_t *buf;
  uint32_t *meta;
  size_t size, meta_len;
  uint32_t first, count;
  if (argc < 5 || napi_get_value_external(env, argv[0], (void **)&d) != napi_ok || !d->d ||
      get_bytes(env, argv[1], (void **)&buf, &size) != napi_ok ||
      get_bytes(env, argv[2], (void **)&meta, &meta_len) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &first) != napi_ok ||
      napi_get_value_uint32(env, argv[4], &count) != napi_ok ||
      (size_t)(first + count) * META_WORDS * 4 > meta_len)
    return throw_type(env, "pcapDumpWrite(dump, data, meta, first, count)");
  for (uint32_t i = first; i < first + count; i++) {
    uint32_t *m = meta + i * META_WORDS;
    if ((size_t)m[4] + m[2] > size) return throw_type(env, "pcapDumpWrite: packet outside data");
    struct pcap_pkthdr h = {.ts = {.tv_sec = m[0], .tv_usec = m[1]}, .caplen = m[2], .len = m[3]};
    pcap_dump((u_char *)d->d, &h, buf + m[4]);
  }
  return NULL;
}

// pcapDumpClose(dump): flushes and closes the file.
static napi_value dump_close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  NAPI_CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  dump_t *d = NULL;
  if (argc < 1 || napi_get_value_external(env, argv[0], (void **)&d) != napi_ok)
    return throw_type(env, "pcapDumpClose(dump)");
  if (d->d) {
    int r = pcap_dump_flush(d->d);
    pcap_dump_close(d->d);
    d->d = NULL;
    if (r < 0) return throw_errno(env, EIO, "pcap_dump_flush");
  }
  return NULL;
}

napi_status register_pcap(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"pcapOpen", NULL, cap_open, NULL, NULL, NULL, napi_default, NULL},
      {"pcapDatalink", NULL, cap_datalink, NULL, NULL, NULL, napi_default, NULL},
      {"pcapSetFilter", NULL, cap_set_filter, NULL, NULL, NULL, napi_default, NULL},
      {"pcapFd", NULL, cap_fd, NULL, NULL, NULL, napi_default, NULL},
      {"pcapRead", NULL, cap_read, NULL, NULL, NULL, napi_default, NULL},
      {"pcapStats", NULL, cap_stats, NULL, NULL, NULL, napi_default, NULL},
      {"pcapClose", NULL, cap_close, NULL, NULL, NULL, napi_default, NULL},
      {"pcapDumpOpen", NULL, dump_open, NULL, NULL, NULL, napi_default, NULL},
      {"pcapDumpWrite", NULL, dump_write, NULL, NULL, NULL, napi_default, NULL},
      {"pcapDumpClose", NULL, dump_close, NULL, NULL, NULL, napi_default, NULL},
  };
  return napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
}
