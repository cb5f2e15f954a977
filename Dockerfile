# leased and its examples. Used by docker-compose.yml.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/leased ./cmd/leased && \
    CGO_ENABLED=0 go build -trimpath -o /out/fenced-writes ./examples/fenced-writes

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
VOLUME /data
EXPOSE 4222 6222 8080
ENTRYPOINT ["/usr/local/bin/leased"]
