# One image for every toolgate service; the compose file picks the command.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/...

FROM debian:bookworm-slim
RUN useradd --system --home /var/lib/toolgate toolgate && mkdir -p /var/lib/toolgate && chown toolgate /var/lib/toolgate
COPY --from=build /out/ /usr/local/bin/
COPY examples/ /etc/toolgate/
USER toolgate
WORKDIR /var/lib/toolgate
ENTRYPOINT []
