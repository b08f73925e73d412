{
  "targets": [
    {
      "target_name": "clbprobe",
      "sources": ["native/addon.c", "native/netlink.c", "native/poll.c",
                  "native/netns.c", "native/bpf.c", "native/pcap.c", "native/mem.c"],
      "libraries": ["-lbpf", "-lpcap"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-std=gnu11"],
      "defines": ["NAPI_VERSION=8"]
    },
    {
      "target_name": "clbprobe_bpf",
      "type": "none",
      "actions": [
        {
          "action_name": "compile_bpf",
          "inputs": ["native/bpf/clbprobe.bpf.c"],
          "outputs": ["<(PRODUCT_DIR)/clbprobe.bpf.o"],
          "action": ["sh", "-c", "clang -O2 -g -Wall -target bpf -mcpu=v3 -I/usr/include/`uname -m`-linux-gnu -c native/bpf/clbprobe.bpf.c -o <(PRODUCT_DIR)/clbprobe.bpf.o"]
        },
        {
          "action_name": "compile_bpf_l3",
          "inputs": ["native/bpf/clbprobe.bpf.c"],
          "outputs": ["<(PRODUCT_DIR)/clbprobe-l3.bpf.o"],
          "action": ["sh", "-c", "clang -O2 -g -Wall -target bpf -mcpu=v3 -DL2_LEN=0 -I/usr/include/`uname -m`-linux-gnu -c native/bpf/clbprobe.bpf.c -o <(PRODUCT_DIR)/clbprobe-l3.bpf.o"]
        },
        {
          "action_name": "compile_ctevents_bpf",
          "inputs": ["native/bpf/ctevents.bpf.c"],
          "outputs": ["<(PRODUCT_DIR)/ctevents.bpf.o"],
          "action": ["sh", "-c", "clang -O2 -g -Wall -target bpf -I/usr/include/`uname -m`-linux-gnu -c native/bpf/ctevents.bpf.c -o <(PRODUCT_DIR)/ctevents.bpf.o"]
        }
      ]
    }
  ]
}
