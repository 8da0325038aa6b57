# Multi-stage build: a static ctxproxy binary on a minimal, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ctxproxy ./cmd/ctxproxy
# The file memory store and the file ledger live under /data, owned by the
# image's nonroot user (65532) so a fresh volume is writable.
RUN mkdir -p /out/data/memories

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ctxproxy /ctxproxy
COPY --from=build --chown=65532:65532 /out/data /data
COPY policies /policies
USER nonroot:nonroot
# Configuration is the binary's own CTXPROXY_* variables (docker-compose.yml
# and the Helm chart set the same ones).
ENV CTXPROXY_LISTEN=0.0.0.0:8080 \
    CTXPROXY_POLICIES=/policies \
    CTXPROXY_MEMORY_DIR=/data/memories \
    CTXPROXY_LEDGER=file:/data/ledger.jsonl \
    CTXPROXY_MEMORY_AUDIT=/data/memory-audit.jsonl
VOLUME ["/data"]
EXPOSE 8080
ENTRYPOINT ["/ctxproxy"]
CMD ["serve"]
