package debian

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Fetch returns the package file's bytes from cache (a directory of
// files named by their SHA-256), downloading it from the mirror into the
// cache first if it is not there. Every byte returned has been checked
// against the lock's SHA-256 and size, whether from the cache or the
// network: a corrupt cache entry is fetched again.
func Fetch(d Deb, cache string) ([]byte, error) {
	name := filepath.Join(cache, d.SHA256+".deb")
	if b, err := os.ReadFile(name); err == nil {
		if verify(d, b) == nil {
			return b, nil
		}
		_ = os.Remove(name)
	}
	b, err := Download(d.Path)
	if err != nil {
		return nil, fmt.Errorf("%s %s (%s): %w", d.Package, d.Version, d.Arch, err)
	}
	if err := verify(d, b); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(cache, ".fetch-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	return b, os.Rename(tmp.Name(), name)
}

func verify(d Deb, b []byte) error {
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != d.SHA256 || int64(len(b)) != d.Size {
		return fmt.Errorf("%s %s (%s): SHA-256 %s, %d bytes; the lock says %s, %d bytes", d.Package, d.Version, d.Arch, got, len(b), d.SHA256, d.Size)
	}
	return nil
}

var httpClient = &http.Client{Timeout: 5 * time.Minute}

// Download GETs path (below a mirror's root, e.g. a Packages index's
// debian/dists/…) from the first of Mirrors that answers; a mirror that
// answers with an error status is not tried past.
func Download(path string) ([]byte, error) {
	var unreachable []string
	for _, mirror := range Mirrors {
		b, err := get(mirror + path)
		var status statusError
		if err == nil || errors.As(err, &status) {
			return b, err
		}
		unreachable = append(unreachable, err.Error())
	}
	return nil, fmt.Errorf("no mirror answers: %s", strings.Join(unreachable, "; "))
}

// statusError is a mirror's answer other than 200 OK.
type statusError struct {
	url, status string
}

func (e statusError) Error() string {
	return fmt.Sprintf("GET %s: %s (a version the mirror no longer holds: regenerate the lock)", e.url, e.status)
}

// get GETs url.
func get(url string) ([]byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError{url, resp.Status}
	}
	return io.ReadAll(resp.Body)
}
