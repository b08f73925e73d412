# clbprobe node agent image.
#   docker build -t clbprobe:dev .
# Builder: compiles the N-API addon (native/, against Node's own headers, no
# download) and the eBPF object (clang -target bpf), then the TypeScript, and
# drops dev dependencies. Runtime: slim Node LTS with only the shared libraries
# the addon links (libbpf, libelf, libpcap, zlib) and the tools clbprobe runs
# (iptables-save/ip6tables-save in both legacy and nft flavours, ipset,
# conntrack, ip, ipvsadm, nft for kube-proxy's nftables mode, nsenter, sysctl). Everything comes from the Docker
# Hub Node image, Debian's apt and the npm registry.
# Keep the builder and runtime on the same Node major: the addon's ABI is N-API
# but node-gyp builds against the builder's headers.
ARG NODE_VERSION=24
ARG DEBIAN=bookworm

FROM node:${NODE_VERSION}-${DEBIAN} AS builder
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      clang llvm libbpf-dev libelf-dev zlib1g-dev libpcap-dev python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# node-gyp would otherwise download Node headers from nodejs.org.
ENV npm_config_nodedir=/usr/local
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY binding.gyp tsconfig.json tsconfig.build.json ./
COPY native ./native
COPY src ./src
COPY scripts/bundle.mjs ./scripts/
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

FROM node:${NODE_VERSION}-${DEBIAN}-slim AS runtime
# iptables ships both xtables-legacy-multi and xtables-nft-multi: clbprobe
# reads whichever backend kube-proxy used. util-linux (nsenter) and procps
# (sysctl) are in the base image.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libbpf1 libelf1 libpcap0.8 zlib1g \
      iptables ipset iproute2 conntrack ipvsadm nftables procps \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# projectRoot() (src/native.ts) finds the addon next to package.json + binding.gyp.
COPY --from=builder /app/package.json /app/binding.gyp ./
COPY --from=builder /app/node_modules ./node_modules
COPY --from=builder /app/dist ./dist
COPY --from=builder /app/build/Release/clbprobe.node /app/build/Release/clbprobe.bpf.o /app/build/Release/clbprobe-l3.bpf.o /app/build/Release/ctevents.bpf.o ./build/Release/
# The agent's seccomp profile: the DaemonSet's init container copies it to the kubelet's directory.
COPY deploy/seccomp/clbprobe.json ./deploy/seccomp/
# `clbprobe` on PATH for whoever execs into the pod (kubectl exec POD -- clbprobe evidence ...).
RUN printf '#!/bin/sh\nexec node /app/dist/bundle/main.js "$@"\n' > /usr/local/bin/clbprobe \
 && chmod 0755 /usr/local/bin/clbprobe
# Runs as root with every capability dropped except NET_ADMIN, NET_RAW, BPF
# and PERFMON (deploy/daemonset.yaml): iptables-save, ipset and conntrack are
# separate processes, and a non-root user's file capabilities would not reach
# them (Kubernetes sets no ambient capabilities). No HEALTHCHECK: the
# DaemonSet's liveness/readiness probes use /healthz and /readyz.
USER 0:0
ENV NODE_ENV=production
EXPOSE 9811
ENTRYPOINT ["node", "/app/dist/bundle/main.js"]
CMD ["agent"]
