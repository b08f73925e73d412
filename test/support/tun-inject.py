# Writes IP packets into a tun device as if they had come in on it: the far side of an L3 link
# (frames start with the IP header) for test/lab/capture-l3.test.ts. Attaching to a tun is an
# ioctl (TUNSETIFF) Node.js cannot make, hence Python (Debian's python3, scripts/setup.sh).
# Run inside the device's namespace (ip netns exec); the device must exist (ip tuntap add ...
# mode tun, persistent) and be up. Detaches on exit.
# Usage: tun-inject.py IFNAME PLAN
#   PLAN: JSON list of {"proto": "udp"|"tcp", "src", "dst", "port", "count", "payload"} (UDP
#   datagrams of `payload` bytes, default 100; TCP: one SYN each), from source port 40000.
# Prints {"done": [packets written per plan item]}.
import fcntl
import json
import os
import socket
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
SPORT = 40000


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def packet(item):
    v6 = ":" in item["dst"]
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    src, dst = socket.inet_pton(fam, item["src"]), socket.inet_pton(fam, item["dst"])
    if item["proto"] == "udp":
        proto = 17
        data = b"a" * item.get("payload", 100)
        l4 = struct.pack("!HHHH", SPORT, item["port"], 8 + len(data), 0) + data
        at = 6
    else:
        proto = 6
        l4 = struct.pack("!HHIIBBHHH", SPORT, item["port"], 1, 0, 5 << 4, 0x02, 65535, 0, 0)
        at = 16
    pseudo = src + dst + (struct.pack("!IxxxB", len(l4), proto) if v6 else struct.pack("!xBH", proto, len(l4)))
    c = checksum(pseudo + l4) or 0xFFFF
    l4 = l4[:at] + struct.pack("!H", c) + l4[at + 2 :]
    if v6:
        return struct.pack("!IHBB", 6 << 28, len(l4), proto, 64) + src + dst + l4
    head = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 0, 0x4000, 64, proto, 0, src, dst)
    head = head[:10] + struct.pack("!H", checksum(head)) + head[12:]
    return head + l4


def main():
    name, plan = sys.argv[1], json.loads(sys.argv[2])
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    done = []
    for item in plan:
        p = packet(item)
        n = 0
        for _ in range(item["count"]):
            if os.write(fd, p) == len(p):
                n += 1
        done.append(n)
    os.close(fd)
    print(json.dumps({"done": done}))


main()
