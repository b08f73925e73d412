{
  "targets": [
    {
      "target_name": "clbprobe",
      "sources": ["native/addon.c", "native/netlink.c", "native/poll.c",
                  "native/netns.c", "native/bpf.c", "native/pcap.c"],
      "libraries": ["-lbpf", "-lpcap"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-std=gnu11"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
