# syntax=docker/dockerfile:1
#
# The aggregator daemon as a container image. Two targets:
#   static (the default, the last stage): the static binary on distroless (CA certificates, tzdata, no shell),
#          user 65532. For SSE and streamable HTTP backends; it has no Node.js, so npm-based stdio servers
#          cannot run in it.
#   node:  the same binary on Debian slim with Node.js, npm/npx and tini, user 65532, for stdio MCP servers
#          (they are child processes of the node that serves them).
#
#   docker build -t mcp-aggregator:static .
#   docker build --target node -t mcp-aggregator:node .
#
# deploy/README.md says how the compose file and the Kubernetes manifests use them, and what of this ran where.

# GO_VERSION follows go.mod's go directive (deploy/deploy_test.go checks that they agree).
ARG GO_VERSION=1.26.8
ARG NODE_VERSION=22

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
# Static (CGO_ENABLED=0: the SQLite driver is pure Go), reproducible paths, no symbol table.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags='-s -w' -o /out/aggregator ./cmd/aggregator \
 && mkdir -p /out/data

FROM node:${NODE_VERSION}-bookworm-slim AS node
# tini is PID 1: it forwards SIGTERM to the daemon and reaps the orphans a stdio server's helpers may leave.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --shell /usr/sbin/nologin nonroot \
 && install -d -o 65532 -g 65532 -m 0700 /data
COPY --from=build /out/aggregator /usr/local/bin/aggregator
# In a container the listeners must be reachable from outside it; listening beyond loopback needs bearer tokens
# and MCP_CREDENTIAL_KEY (the daemon refuses to start without them).
ENV MCP_AGGREGATOR_LISTEN=0.0.0.0:8081 \
    MCP_AGGREGATOR_MCP_LISTEN=0.0.0.0:8082 \
    MCP_AGGREGATOR_DATA_DIR=/data
USER 65532:65532
WORKDIR /home/nonroot
EXPOSE 8081 8082 7946
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/aggregator"]
CMD ["serve"]

FROM gcr.io/distroless/static-debian12:nonroot AS static
COPY --from=build /out/aggregator /aggregator
COPY --from=build --chown=65532:65532 /out/data /data
ENV MCP_AGGREGATOR_LISTEN=0.0.0.0:8081 \
    MCP_AGGREGATOR_MCP_LISTEN=0.0.0.0:8082 \
    MCP_AGGREGATOR_DATA_DIR=/data
USER 65532:65532
EXPOSE 8081 8082 7946
ENTRYPOINT ["/aggregator"]
CMD ["serve"]
