# syntax=docker/dockerfile:1
# fenced's image, for those who build with Docker (or podman/buildah):
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) --build-arg CREATED=$(git log -1 --format=%ct) -t fenced .
# `make image` builds the same image offline, without Docker and without
# pulling anything, as an OCI archive (bin/fenced-image.tar). Both put the
# same files in it: the build stage below writes them with hack/image, the
# program make image uses, and the final stage copies them onto scratch.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=
ARG CREATED=0
# The binary as make image builds it: static, -trimpath, no build ID, the
# Makefile's GO_TAGS.
ENV GOFLAGS=-tags=kustomize_disable_go_plugin_support
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -buildid= -X fenced.io/fenced/pkg/version.stamped=${VERSION}" -o /out/fenced ./cmd/fenced
RUN go run ./hack/image -binary /out/fenced -rootfs /rootfs -version "${VERSION}" -revision "${REVISION}" -created "${CREATED}"

FROM scratch
ARG VERSION=dev
ARG REVISION=
COPY --from=build /rootfs/ /
LABEL org.opencontainers.image.title="fenced" \
      org.opencontainers.image.description="fences dead Kubernetes nodes on power evidence so that their volumes move" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt HOME=/home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/fenced"]
CMD ["agent"]
