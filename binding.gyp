{
  "targets": [
    {
      "target_name": "clbprobe",
      "sources": ["native/addon.c", "native/netlink.c", "native/poll.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-std=gnu11"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
