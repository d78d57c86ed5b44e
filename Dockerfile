# One image for every toolgate service; the compose file picks the command.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./cmd/...

FROM debian:bookworm-slim
# The sandbox exists in the image so that a named volume mounted there
# starts owned by toolgate.
RUN useradd --system --home /var/lib/toolgate toolgate && mkdir -p /var/lib/toolgate/sandbox && chown -R toolgate /var/lib/toolgate
COPY --from=build /out/ /usr/local/bin/
COPY examples/ /etc/toolgate/
USER toolgate
WORKDIR /var/lib/toolgate
ENTRYPOINT []
