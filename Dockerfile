# Multi-stage build: a static ctxproxy binary on a minimal, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ctxproxy ./cmd/ctxproxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ctxproxy /ctxproxy
COPY policies /policies
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/ctxproxy"]
CMD ["--listen", "0.0.0.0:8080", "--policies", "/policies"]
